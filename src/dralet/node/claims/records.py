"""A claim's devices as the record keeps them, built once from the claim as read.

``device_records`` keeps each allocated device (with its configs in the claim's
precedence order) in the record prepare writes; ``claim_allocation`` hands the backend
those same devices; ``with_states`` adds what the backend's ``prepare_claim`` returned.
Pure functions over values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dralet.checkpoint.model import ClaimRecord, DeviceRecord, evolve
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    DeviceConfig,
    PreparedDevice,
)
from dralet.node.claims.store import now_stamp

__all__ = [
    "cdi_device_name",
    "cdi_names",
    "claim_allocation",
    "device_records",
    "with_states",
]


def claim_allocation(ref: ClaimRef, devices: Sequence[DeviceRecord]) -> ClaimAllocation:
    """What the backend is handed for these devices of a claim: each device as kept,
    and the claim's configs that apply to any of them, in precedence order."""
    configs: dict[int, DeviceConfig] = {}
    for device in devices:
        for config, place in zip(device.allocated.configs, device.places, strict=True):
            configs.setdefault(place, config)
    return ClaimAllocation(
        claim=ref,
        devices=tuple(d.allocated for d in devices),
        configs=tuple(configs[k] for k in sorted(configs)),
    )


def cdi_device_name(uid: str, device: DeviceRecord | AllocatedDevice) -> str:
    suffix = f"-{device.share_id}" if device.share_id else ""
    return f"{uid}-{device.device}{suffix}"


def _places(mine: Sequence[DeviceConfig], claims: Sequence[DeviceConfig]) -> list[int]:
    """Where each of a device's configs stands among all of the claim's (a device's
    configs are the claim's in the same order, less those for other requests)."""
    places: list[int] = []
    at = 0
    for config in mine:
        while at < len(claims) and claims[at] != config:
            at += 1
        places.append(at if at < len(claims) else len(claims) + len(places))
        at += 1
    return places


def cdi_names(base: str, more: int) -> list[str]:
    """A device's CDI device names: its own, then one per further CDI device."""
    return [base, *(f"{base}-{n}" for n in range(1, more + 1))]


def _cdi_ids(device: DeviceRecord, more: int) -> tuple[str, ...]:
    """``device``'s fully qualified CDI ids with ``more`` further CDI devices."""
    kind, _, base = device.cdi_device_ids[0].partition("=")
    return tuple(f"{kind}={name}" for name in cdi_names(base, more))


def device_records(
    uid: str,
    devices: Sequence[AllocatedDevice],
    configs: Sequence[DeviceConfig] = (),
    *,
    cdi_kind: str,
) -> tuple[DeviceRecord, ...]:
    """The records of a claim's allocated devices, each keeping its device as read and
    where its configs stand among the claim's ``configs``.

    A device allocated for several requests is one record with every request's name;
    the backend is handed it once: for the first of those names, with admin access if
    any result asked for it, the configs of the last result and the other fields of the
    first.
    """
    by_device: dict[tuple[str, str, str], DeviceRecord] = {}
    for a in devices:
        key = (a.pool, a.device, a.share_id)
        seen = by_device.get(key)
        if seen is None:
            by_device[key] = DeviceRecord(
                allocated=a,
                request_names=(a.request,),
                config_places=tuple(_places(a.configs, configs)),
                cdi_device_ids=(f"{cdi_kind}={cdi_device_name(uid, a)}",),
            )
            continue
        names = tuple(sorted({a.request, *seen.request_names}))
        by_device[key] = evolve(
            seen,
            allocated=dataclasses.replace(
                seen.allocated,
                request=names[0],
                admin_access=a.admin_access or seen.admin_access,
                configs=a.configs,
            ),
            request_names=names,
            config_places=tuple(_places(a.configs, configs)),
        )
    return tuple(by_device.values())


def with_states(record: ClaimRecord, results: Sequence[PreparedDevice | None]) -> ClaimRecord:
    """The states (and the CDI ids of any further CDI devices) recorded per device."""
    devices = tuple(
        device
        if result is None
        else evolve(
            device.with_prepared_state(result.state),
            cdi_device_ids=_cdi_ids(device, len(result.more_edits)),
            external_cdi_ids=tuple(result.external_cdi_ids),
        )
        for device, result in zip(record.devices, results, strict=True)
    )
    return evolve(record, devices=devices, updated_at=now_stamp())
