"""A claim's devices as the record keeps them, built once from the claim as read.

``device_records`` turns the allocation (and the configs that apply, in precedence
order) into the records prepare writes; ``allocated`` and ``claim_allocation`` give
the backend the same devices back from a record; ``with_states`` adds what the
backend's ``prepare_claim`` returned. Pure functions over values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dralet.checkpoint.model import CONFIGS_KEY, ClaimRecord, DeviceRecord, evolve
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    DeviceConfig,
    PreparedDevice,
)
from dralet.node.claims.store import now_stamp

__all__ = [
    "SUBREQUEST",
    "allocated",
    "cdi_device_name",
    "cdi_names",
    "claim_allocation",
    "device_records",
    "result_fields",
    "with_states",
]


def _config(stored: Mapping[str, Any]) -> DeviceConfig:
    return DeviceConfig(
        source="class" if stored.get("source") == "class" else "claim",
        requests=tuple(stored.get("requests") or ()),
        parameters=dict(stored.get("parameters") or {}),
    )


def allocated(record: DeviceRecord) -> AllocatedDevice:
    """The device as the backend saw it in ``prepare_claim``: same request, pool, configs."""
    return AllocatedDevice(
        request=record.request_names[0] if record.request_names else "",
        pool=record.pool,
        device=record.device,
        admin_access=record.admin_access,
        share_id=record.share_id,
        configs=tuple(_config(c) for c in record.configs),
        consumed_capacity={
            str(k): str(v) for k, v in (record.result_fields.get(CONSUMED) or {}).items()
        },
        tolerations=tuple(record.result_fields.get(TOLERATIONS) or ()),
        subrequest=str(record.result_fields.get(SUBREQUEST) or ""),
        extra={k: v for k, v in record.result_fields.items() if k not in _KEPT_APART},
    )


CONSUMED = "consumedCapacity"
TOLERATIONS = "tolerations"
SUBREQUEST = "subrequest"
"""Stored beside the result's other fields; not an API field name (the API writes
``request: gpu/large``)."""
_KEPT_APART = (CONSUMED, TOLERATIONS, SUBREQUEST)


def result_fields(device: AllocatedDevice) -> dict[str, Any]:
    """What of ``device`` the record keeps beyond request, pool, device and share ID."""
    fields: dict[str, Any] = dict(device.extra)
    if device.consumed_capacity:
        fields[CONSUMED] = dict(device.consumed_capacity)
    if device.tolerations:
        fields[TOLERATIONS] = [dict(t) for t in device.tolerations]
    if device.subrequest:
        fields[SUBREQUEST] = device.subrequest
    return fields


def claim_allocation(ref: ClaimRef, devices: Sequence[DeviceRecord]) -> ClaimAllocation:
    """What the backend is handed for these devices of a claim: each device, and the
    claim's configs that apply to any of them, in precedence order."""
    configs: dict[int, DeviceConfig] = {}
    for device in devices:
        for stored in device.configs:
            configs.setdefault(int(stored.get("order", 0)), _config(stored))
    return ClaimAllocation(
        claim=ref,
        devices=tuple(allocated(d) for d in devices),
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


def _stored_config(config: DeviceConfig, order: int) -> dict[str, Any]:
    return {
        "source": config.source,
        "requests": list(config.requests),
        "parameters": dict(config.parameters),
        "order": order,
    }


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
    """The records of a claim's allocated devices (a device allocated for several
    requests once, with every request's name), each with its configs in the claim's
    precedence order."""
    by_device: dict[tuple[str, str, str], DeviceRecord] = {}
    for a in devices:
        key = (a.pool, a.device, a.share_id)
        seen = by_device.get(key)
        names = tuple(sorted({a.request, *(seen.request_names if seen else ())}))
        by_device[key] = DeviceRecord(
            pool=a.pool,
            device=a.device,
            request_names=names,
            cdi_device_ids=(f"{cdi_kind}={cdi_device_name(uid, a)}",),
            admin_access=a.admin_access or bool(seen and seen.admin_access),
            share_id=a.share_id,
            result_fields=seen.result_fields if seen else result_fields(a),
            backend_state=(
                {
                    CONFIGS_KEY: [
                        _stored_config(c, place)
                        for c, place in zip(a.configs, _places(a.configs, configs), strict=True)
                    ]
                }
                if a.configs
                else {}
            ),
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
