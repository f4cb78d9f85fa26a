"""A claim from the API read to its released record: the claim's allocation checked and
its devices built into records once, and the lifecycle those records move through.

``select_allocation`` is the pure check that a fetched claim is the one the kubelet
meant and is allocated to this driver on this node; ``device_records`` keeps each
allocated device (with its configs in the claim's precedence order) in the record
prepare writes; ``claim_allocation`` hands the backend those same devices;
``with_states`` adds what the backend's ``prepare_claim`` returned.

The lifecycle is data that drives the code: the routes (``prepare``, ``teardown``) hit
the failpoints each ``Transition`` names after it (declared here, so the crash suite
covers them), and every record state they write goes through ``moved``, which refuses a
change of state the table does not allow. Recovery and ``dralet audit`` read the phase
a crash left from the record (``phase_of``), and the docs' "What dralet does for each
claim" is checked against ``lifecycle_lines`` by a test. Each transition names the
durable fact it leaves behind: the record state it writes, or the file it writes or
removes.

Over 500 lines on purpose: a claim's allocation, the records built from it and the states
they move through are read together; apart, a prepare would run code in one more file.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dralet import errors, failpoints
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord, evolve
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    ConfigSource,
    DeviceConfig,
    PreparedDevice,
)
from dralet.node.settings import DriverSettings

__all__ = [
    "FP_AFTER_BACKEND_PREPARE",
    "FP_AFTER_FINALIZER",
    "FP_AFTER_FINALIZER_REMOVED",
    "FP_AFTER_METADATA",
    "FP_AFTER_RELEASE",
    "FP_AFTER_SPEC",
    "FP_AFTER_STARTED",
    "FP_AFTER_UNPREPARE_STARTED",
    "FP_ANSWERED_FINALIZER_OWED",
    "PREPARE",
    "TRANSITIONS",
    "UNPREPARE",
    "Phase",
    "Staleness",
    "Transition",
    "base_request_name",
    "cdi_device_name",
    "cdi_names",
    "claim_allocation",
    "claim_configs",
    "claim_devices",
    "device_records",
    "driver_configs",
    "lifecycle_lines",
    "moved",
    "now_stamp",
    "phase_of",
    "select_allocation",
    "staleness",
    "with_states",
]


_stamp: tuple[int, str] = (0, "")


def now_stamp() -> str:
    """UTC now to the second, as records carry it (formatted once per second)."""
    global _stamp
    second = int(time.time())
    if _stamp[0] != second:
        _stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _stamp[1]


def base_request_name(request: str) -> str:
    """``req/sub`` → ``req``: the kubelet matches containers on the base request name."""
    return request.split("/", 1)[0]


_RESULT_FIELDS = frozenset(
    {
        "request",
        "driver",
        "pool",
        "device",
        "adminAccess",
        "shareID",
        "consumedCapacity",
        "tolerations",
    }
)
_SOURCES: Mapping[str, ConfigSource] = {"FromClass": "class", "FromClaim": "claim"}


def driver_configs(allocation: Mapping[str, Any], driver: str) -> tuple[DeviceConfig, ...]:
    """This driver's opaque configs of an allocation, in precedence order.

    DeviceClass configs come before the claim's own, each group in API order; a later
    config wins over an earlier one. The same order as the upstream example driver's
    ``GetOpaqueDeviceConfigs`` (kubernetes-sigs/dra-example-driver,
    cmd/dra-example-kubeletplugin/state.go), which orders class configs first even when
    the API lists them after claim configs. A config with an unknown source is taken as
    the claim's (the user's), the group that wins.
    """
    entries = [
        c
        for c in (allocation.get("devices") or {}).get("config") or []
        if (c.get("opaque") or {}).get("driver") == driver
    ]
    made = [
        DeviceConfig(
            source=_SOURCES.get(str(c.get("source", "")), "claim"),
            requests=tuple(str(r) for r in c.get("requests") or ()),
            parameters=dict(c["opaque"].get("parameters") or {}),
        )
        for c in entries
    ]
    return tuple(sorted(made, key=lambda c: c.source != "class"))


def claim_configs(claim: Mapping[str, Any] | None, driver: str) -> tuple[DeviceConfig, ...]:
    """``driver_configs`` of a claim's allocation (none when it is not allocated)."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return driver_configs(allocation, driver)


def select_allocation(
    claim: Mapping[str, Any] | None,
    ref: ClaimRef,
    *,
    driver: str,
    pool: str,
    require_reserved: bool = True,
) -> list[AllocatedDevice]:
    """The allocation results of ``claim`` that this driver must prepare on this node.

    Raises ``ClaimError`` with a message for the pod's event when the claim is gone,
    replaced (other UID), being deleted before it was prepared, not allocated, not
    reserved for any pod, or has no device of ours on this node.
    """
    where = f"ResourceClaim {ref.namespace}/{ref.name}"
    if claim is None:
        raise errors.ClaimError(ref.uid, f"{where} not found")
    metadata = claim.get("metadata", {})
    if metadata.get("uid") != ref.uid:
        raise errors.ClaimError(
            ref.uid, f"{where} was replaced: it has UID {metadata.get('uid')}, not {ref.uid}"
        )
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        raise errors.ClaimError(ref.uid, f"{where} is not allocated")
    if require_reserved and not status.get("reservedFor"):
        raise errors.ClaimError(ref.uid, f"{where} is not reserved for any pod")
    results = (allocation.get("devices") or {}).get("results") or []
    configs = driver_configs(allocation, driver)
    mine: list[AllocatedDevice] = []
    for result in results:
        if result.get("driver") != driver:
            continue
        if result.get("pool") != pool:
            continue
        request = str(result.get("request", ""))
        mine.append(
            AllocatedDevice(
                request=base_request_name(request),
                subrequest=request.partition("/")[2],
                pool=str(result["pool"]),
                device=str(result.get("device", "")),
                admin_access=bool(result.get("adminAccess", False)),
                share_id=str(result.get("shareID", "") or ""),
                configs=tuple(c for c in configs if c.applies_to(request)),
                consumed_capacity={
                    str(k): str(v) for k, v in (result.get("consumedCapacity") or {}).items()
                },
                tolerations=tuple(result.get("tolerations") or ()),
                extra={k: v for k, v in result.items() if k not in _RESULT_FIELDS},
            )
        )
    if not mine:
        raise errors.ClaimError(
            ref.uid, f"{where} has no device allocated from driver {driver} in pool {pool}"
        )
    return mine


@dataclass(frozen=True)
class Staleness:
    """Why a prepared claim no longer belongs on this node."""

    kind: str
    """``gone``, ``replaced``, ``moved`` or ``deleted-unused``."""
    message: str


def staleness(
    claim: Mapping[str, Any] | None, ref: ClaimRef, *, driver: str, pool: str
) -> Staleness | None:
    """Whether the API's view of a claim prepared here makes it stale (None: it is not).

    The one rule behind stale-claim cleanup and ``dralet audit``: the claim is gone,
    replaced under its name (another UID), no longer allocated to this driver's pool, or
    being deleted with no pod left using it.
    """
    where = f"ResourceClaim {ref.namespace}/{ref.name}"
    if claim is None:
        return Staleness("gone", f"{where} no longer exists")
    metadata = claim.get("metadata", {})
    if metadata.get("uid") != ref.uid:
        return Staleness("replaced", f"{where} now has UID {metadata.get('uid')}")
    try:
        select_allocation(claim, ref, driver=driver, pool=pool, require_reserved=False)
    except errors.ClaimError:
        return Staleness("moved", f"{where} is no longer allocated to this node")
    if metadata.get("deletionTimestamp") and not (claim.get("status") or {}).get("reservedFor"):
        return Staleness("deleted-unused", f"{where} is being deleted and no pod uses it any more")
    return None


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


def claim_devices(
    claim: Mapping[str, Any] | None,
    ref: ClaimRef,
    settings: DriverSettings,
    *,
    require_reserved: bool = True,
) -> tuple[DeviceRecord, ...]:
    """The device records of ``claim`` as read for ``ref``: its allocation checked
    (``select_allocation``), each device kept with its configs (``device_records``)."""
    allocated = select_allocation(
        claim,
        ref,
        driver=settings.driver_name,
        pool=settings.pool_name,
        require_reserved=require_reserved,
    )
    configs = claim_configs(claim, settings.driver_name)
    return device_records(ref.uid, allocated, configs, cdi_kind=settings.cdi_kind)


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


FP_AFTER_STARTED = "claim.prepare.after-started"
FP_AFTER_FINALIZER = "claim.prepare.after-finalizer"
FP_AFTER_BACKEND_PREPARE = "claim.prepare.after-backend"
FP_AFTER_METADATA = "claim.prepare.after-metadata"
FP_AFTER_SPEC = "claim.prepare.after-spec"
FP_AFTER_UNPREPARE_STARTED = "claim.unprepare.after-started"
FP_AFTER_RELEASE = "claim.unprepare.after-release"
FP_ANSWERED_FINALIZER_OWED = "claim.unprepare.answered-finalizer-owed"
FP_AFTER_FINALIZER_REMOVED = "claim.unprepare.after-finalizer"


class Phase(enum.StrEnum):
    NONE = "none"
    PREPARE_STARTED = "PrepareStarted"
    DEVICE_PREPARED = "DevicePrepared"
    SPEC_WRITTEN = "SpecWritten"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"
    SPEC_REMOVED = "SpecRemoved"
    DEVICES_RELEASED = "DevicesReleased"
    RELEASED = "Released"
    GONE = "gone"


@dataclass(frozen=True)
class Transition:
    before: Phase
    after: Phase
    action: str
    """What the engine does, in the README's words."""
    durable: str
    """What is on disk (or in the API) once the transition is done."""
    failpoints: tuple[str, ...] = ()
    """Hit along the transition, each once what it follows is durable (in either order
    for the finalizer and the backend's prepare, which run at the same time: the
    PrepareStarted record already says both may have happened)."""


PREPARE: tuple[Transition, ...] = (
    Transition(
        Phase.NONE,
        Phase.PREPARE_STARTED,
        "PrepareStarted (devices chosen, exclusivity checked)",
        "record PrepareStarted, finalizer marked as possibly added",
        (FP_AFTER_STARTED,),
    ),
    Transition(
        Phase.PREPARE_STARTED,
        Phase.DEVICE_PREPARED,
        "finalizer on the ResourceClaim, while backend.prepare_claim runs (each device's "
        "state kept for the completion write)",
        "finalizer on the API object; the backend holds the devices (a crash from here "
        "on asks it for their states)",
        (FP_AFTER_FINALIZER, FP_AFTER_BACKEND_PREPARE),
    ),
    Transition(
        Phase.DEVICE_PREPARED,
        Phase.SPEC_WRITTEN,
        "CDI spec written atomically",
        "CDI spec file (after the device metadata files it mounts)",
        (FP_AFTER_METADATA, FP_AFTER_SPEC),
    ),
    Transition(
        Phase.SPEC_WRITTEN,
        Phase.PREPARE_COMPLETED,
        "PrepareCompleted",
        "record PrepareCompleted with the spec document and each device's state",
    ),
)

UNPREPARE: tuple[Transition, ...] = (
    Transition(
        Phase.PREPARE_COMPLETED,
        Phase.UNPREPARE_STARTED,
        "UnprepareStarted",
        "record UnprepareStarted",
        (FP_AFTER_UNPREPARE_STARTED,),
    ),
    Transition(
        Phase.UNPREPARE_STARTED,
        Phase.SPEC_REMOVED,
        "CDI spec unlinked",
        "no CDI spec file",
    ),
    Transition(
        Phase.SPEC_REMOVED,
        Phase.DEVICES_RELEASED,
        "backend.release_claim with each device's recorded state",
        "the backend holds no device of the claim",
        (FP_AFTER_RELEASE,),
    ),
    Transition(
        Phase.DEVICES_RELEASED,
        Phase.RELEASED,
        "finalizer removed",
        "record Released while the finalizer removal is retried",
        (FP_ANSWERED_FINALIZER_OWED, FP_AFTER_FINALIZER_REMOVED),
    ),
    Transition(Phase.RELEASED, Phase.GONE, "record removed", "no record"),
)

TRANSITIONS: tuple[Transition, ...] = PREPARE + UNPREPARE
"""Every forward transition; a failed or interrupted prepare rolls back along UNPREPARE
from its phase (PrepareStarted and later go to UnprepareStarted)."""

_RECORDED: dict[ClaimState, Phase] = {
    ClaimState.PREPARE_STARTED: Phase.PREPARE_STARTED,
    ClaimState.PREPARE_COMPLETED: Phase.PREPARE_COMPLETED,
    ClaimState.UNPREPARE_STARTED: Phase.UNPREPARE_STARTED,
    ClaimState.RELEASED: Phase.RELEASED,
}


_RECORDS: dict[Phase, ClaimState | None] = {
    Phase.NONE: None,
    Phase.PREPARE_STARTED: ClaimState.PREPARE_STARTED,
    Phase.DEVICE_PREPARED: ClaimState.PREPARE_STARTED,
    Phase.SPEC_WRITTEN: ClaimState.PREPARE_STARTED,
    Phase.PREPARE_COMPLETED: ClaimState.PREPARE_COMPLETED,
    Phase.UNPREPARE_STARTED: ClaimState.UNPREPARE_STARTED,
    Phase.SPEC_REMOVED: ClaimState.UNPREPARE_STARTED,
    Phase.DEVICES_RELEASED: ClaimState.UNPREPARE_STARTED,
    Phase.RELEASED: ClaimState.RELEASED,
    Phase.GONE: None,
}
"""The record state each phase is recorded as (a phase between two record writes is
told apart by the files and device states, ``phase_of``)."""


def _record_moves() -> frozenset[tuple[ClaimState, ClaimState]]:
    moves = {
        (_RECORDS[t.before], _RECORDS[t.after])
        for t in TRANSITIONS
        if _RECORDS[t.before] != _RECORDS[t.after]
    }
    # A failed or interrupted prepare rolls back from any of its phases.
    moves |= {(_RECORDS[t.after], ClaimState.UNPREPARE_STARTED) for t in PREPARE}
    return frozenset((a, b) for a, b in moves if a is not None and b is not None and a != b)


RECORD_MOVES = _record_moves()
"""Every change of record state the table allows."""

failpoints.declare(*(point for t in TRANSITIONS for point in t.failpoints))


class TransitionError(AssertionError):
    """A route wrote a record state the lifecycle table does not allow (a bug)."""


def moved(record: ClaimRecord, state: ClaimState, **changes: Any) -> ClaimRecord:
    """``record`` in ``state`` (with ``changes``), if the table allows that move."""
    if record.state != state and (record.state, state) not in RECORD_MOVES:
        raise TransitionError(
            f"claim {record.uid}: {record.state} → {state} is not a transition of the "
            "claim lifecycle"
        )
    return record.with_state(state, **changes)


def phase_of(record: ClaimRecord | None, *, spec_present: bool = False) -> Phase:
    """The furthest phase a record (and the claim's spec file) proves was reached."""
    if record is None:
        return Phase.NONE
    phase = _RECORDED[record.state]
    if phase is Phase.PREPARE_STARTED:
        if spec_present:
            return Phase.SPEC_WRITTEN
        if any(d.prepared for d in record.devices):
            return Phase.DEVICE_PREPARED
    return phase


def _chain(transitions: tuple[Transition, ...]) -> str:
    return " → ".join(t.action for t in transitions)


def lifecycle_lines(width: int = 88) -> list[str]:
    """The prepare and unprepare chains as the README shows them, wrapped at ``width``."""
    lines: list[str] = []
    for label, transitions in (("prepare", PREPARE), ("unprepare", UNPREPARE)):
        words = _chain(transitions).split(" ")
        line = f"{label:<10} "
        for word in words:
            if len(line) + len(word) + 1 > width and line.strip() != label:
                lines.append(line.rstrip())
                line = " " * 11
            line += word + " "
        lines.append(line.rstrip())
    return lines
