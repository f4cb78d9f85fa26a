"""ResourceClaims in memory, for a driver's tests without an API server.

``MemoryClaims`` is a ``dralet.ClaimSource``: hand it to the driver (or the claim engine)
in place of the API client, add claims shaped as the scheduler leaves them with
``allocated_claim``, and read back the finalizers the driver set::

    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0")]))
    ...
    assert claims.finalizers("default", "c1") == []

For HTTP semantics (watches, conflicts, schemas) use the API stand-in, ``dralet.apiserver``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dralet.node.backend import ClaimRef, ClaimUID

__all__ = ["DRIVER", "NODE", "MemoryClaims", "allocated_claim", "claim_ref"]

DRIVER = "gpu.example.com"
"""The driver ``allocated_claim`` allocates from unless told otherwise."""
NODE = "node-a"
"""The node (and pool) ``allocated_claim`` allocates on unless told otherwise."""


def _copied(value: Any) -> Any:
    """A deep copy of JSON-shaped data, as each API read hands out a fresh object (about
    three times faster than ``copy.deepcopy`` on a claim, which a driver under load would
    otherwise pay per claim read in tests and benchmarks)."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def allocated_claim(
    name: str,
    *,
    uid: str | None = None,
    namespace: str = "default",
    devices: Sequence[tuple[str, str]] = (("gpu", "gpu-0"),),
    driver: str = DRIVER,
    pool: str = NODE,
    reserved: bool = True,
    admin_access: bool = False,
) -> dict[str, Any]:
    """A ResourceClaim (v1 shape) allocated to ``devices`` as (request, device) pairs, as
    the scheduler leaves it: reserved for a pod unless ``reserved=False``."""
    results = [
        {"request": request, "driver": driver, "pool": pool, "device": device}
        | ({"adminAccess": True} if admin_access else {})
        for request, device in devices
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "finalizers": [],
        },
        "spec": {
            "devices": {
                "requests": [{"name": r, "exactly": {"deviceClassName": "gpu"}} for r, _ in devices]
            }
        },
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}]
            if reserved
            else [],
        },
    }


def claim_ref(claim: Mapping[str, Any]) -> ClaimRef:
    """How the claim engine and a backend name ``claim`` (a ResourceClaim dict): the
    ``ClaimRef`` a test hands to ``ClaimEngine.prepare`` or puts in a ``ClaimAllocation``."""
    meta = claim["metadata"]
    return ClaimRef(ClaimUID(str(meta["uid"])), str(meta["namespace"]), str(meta["name"]))


class MemoryClaims:
    """ResourceClaims in a dict, with finalizer semantics like the API server's: a claim
    deleted while it has finalizers gets a deletionTimestamp and goes when the last one
    is removed; finalizer changes for another UID (a claim recreated under the same
    name) do nothing.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        """The claims by (namespace, name)."""
        self.calls: list[str] = []
        """Every call the driver made, in order (``"get ns/name"``, ``"add-finalizer ..."``)."""
        self.fail_finalizer_removal = False
        """Set: ``remove_finalizer`` raises ``ConnectionError``, as an unreachable server."""
        self.fail_device_status = False
        """Set: ``apply_device_status`` raises ``ConnectionError``."""

    def add(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``claim`` (replacing one of the same name); the stored object."""
        obj: dict[str, Any] = _copied(dict(claim))
        meta = obj["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = obj
        return obj

    def ref(self, claim: Mapping[str, Any]) -> tuple[str, str, str]:
        """(namespace, uid, name) of ``claim``: what the kubelet names it by."""
        meta = claim["metadata"]
        return meta["namespace"], meta["uid"], meta["name"]

    def delete(self, namespace: str, name: str) -> None:
        """Delete as the API server does: marked while finalizers remain, else gone."""
        obj = self.objects.get((namespace, name))
        if obj is None:
            return
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:
            del self.objects[(namespace, name)]

    def finalizers(self, namespace: str, name: str) -> list[str]:
        """The claim's finalizers ([] when it is gone)."""
        obj = self.objects.get((namespace, name))
        return list(obj["metadata"].get("finalizers", [])) if obj else []

    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        """A copy of every claim, as a list call returns them: what ``dralet audit``
        reads to find claims the node holds that the API no longer knows."""
        self.calls.append("list")
        return [_copied(obj) for obj in self.objects.values()]

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A copy of the claim, or None."""
        self.calls.append(f"get {namespace}/{name}")
        obj = self.objects.get((namespace, name))
        return _copied(obj) if obj else None

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Add ``finalizer`` to the claim with this UID; False if that claim is gone
        (``current`` is ignored: the dict here is always current)."""
        self.calls.append(f"add-finalizer {namespace}/{name}")
        obj = self.objects.get((namespace, name))
        if obj is None or obj["metadata"]["uid"] != uid:
            return False
        fins = obj["metadata"].setdefault("finalizers", [])
        if finalizer not in fins:
            fins.append(finalizer)
        return True

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        """Remove ``finalizer``; True also when the claim with this UID is gone."""
        self.calls.append(f"remove-finalizer {namespace}/{name}")
        if self.fail_finalizer_removal:
            raise ConnectionError("API server unreachable")
        obj = self.objects.get((namespace, name))
        if obj is None or obj["metadata"]["uid"] != uid:
            return True
        fins = obj["metadata"].get("finalizers", [])
        if finalizer in fins:
            fins.remove(finalizer)
        if not fins and obj["metadata"].get("deletionTimestamp"):
            del self.objects[(namespace, name)]
        return True

    async def apply_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        driver: str,
        devices: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Replace ``driver``'s entries of ``status.devices`` with ``devices`` (other
        drivers' stay, as with the API server's server-side apply); False if gone."""
        self.calls.append(f"device-status {namespace}/{name} {len(devices)}")
        if self.fail_device_status:
            raise ConnectionError("API server unreachable")
        obj = self.objects.get((namespace, name))
        if obj is None or obj["metadata"]["uid"] != uid:
            return False
        status = obj.setdefault("status", {})
        kept = [d for d in status.get("devices") or [] if d.get("driver") != driver]
        status["devices"] = kept + [_copied(dict(d)) for d in devices]
        if not status["devices"]:
            del status["devices"]
        return True
