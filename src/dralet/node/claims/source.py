"""How the claim engine reads ResourceClaims and keeps its finalizer on them.

``ClaimSource`` is the port: the real implementation is ``dralet.kube.ClaimClient``
(the Kubernetes API through the official client); tests and the demo point it at the
in-process API stand-in. ``select_allocation`` is the pure check that a fetched claim is
the one the kubelet meant and is allocated to this driver on this node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dralet import errors
from dralet.node.backend import AllocatedDevice, ClaimRef, ConfigSource, DeviceConfig

__all__ = [
    "ClaimSource",
    "DeviceStatusWriter",
    "EventSink",
    "NoClaimSource",
    "Staleness",
    "claim_configs",
    "driver_configs",
    "finalizer_name",
    "select_allocation",
    "staleness",
]


class ClaimSource(Protocol):
    """Where the claim engine reads ResourceClaims and keeps its finalizer on them:
    ``dralet.kube.ClaimClient`` against the API server, ``dralet.testing.MemoryClaims``
    in an author's tests."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ResourceClaim as a JSON dict, or None when it does not exist."""
        ...

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Add ``finalizer`` to the claim with this UID; False if that claim is gone.

        ``current`` is the claim as the caller just read it: a source that patches with
        a resourceVersion precondition starts from it instead of reading it again.
        """
        ...

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        """Remove ``finalizer``; True also when the claim (with this UID) is already gone."""
        ...


@runtime_checkable
class DeviceStatusWriter(Protocol):
    """A ``ClaimSource`` that can also write the claim's ``status.devices`` entries of
    one driver (``DriverSettings.write_device_status``)."""

    async def apply_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        driver: str,
        devices: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Make ``devices`` this driver's entries of the claim with this UID (an empty
        list removes them), leaving other drivers' alone; False if that claim is gone."""
        ...


class NoClaimSource:
    """The source of a driver run without an API server: nothing can be prepared (the
    claim's allocation is needed), and there is no finalizer to add or remove."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        raise errors.PermanentError("no ResourceClaim source configured (no API server)")

    async def add_finalizer(self, *_: Any, **__: Any) -> bool:
        return False

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        return True


class EventSink(Protocol):
    async def warn(self, reason: str, message: str) -> None:
        """Record a Warning Event about this node (``dralet.kube.events.NodeEvents``)."""
        ...


def finalizer_name(driver: str) -> str:
    return f"{driver}/prepared"


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
