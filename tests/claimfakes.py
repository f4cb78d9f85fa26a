"""An in-memory ClaimSource for unit tests of the ledger (the API stand-in covers HTTP)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

DRIVER = "gpu.example.com"
NODE = "node-a"


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
    """A ResourceClaim (v1 shape) allocated to ``devices`` as (request, device) pairs."""
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


class MemoryClaims:
    """ResourceClaims in a dict, with finalizer semantics like the API server's."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail_finalizer_removal = False

    def add(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(claim))
        meta = obj["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = obj
        return obj

    def ref(self, claim: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = claim["metadata"]
        return meta["namespace"], meta["uid"], meta["name"]

    def delete(self, namespace: str, name: str) -> None:
        obj = self.objects.get((namespace, name))
        if obj is None:
            return
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:
            del self.objects[(namespace, name)]

    def finalizers(self, namespace: str, name: str) -> list[str]:
        obj = self.objects.get((namespace, name))
        return list(obj["metadata"].get("finalizers", [])) if obj else []

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append(f"get {namespace}/{name}")
        obj = self.objects.get((namespace, name))
        return copy.deepcopy(obj) if obj else None

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        self.calls.append(f"add-finalizer {namespace}/{name}")
        obj = self.objects.get((namespace, name))
        if obj is None or obj["metadata"]["uid"] != uid:
            return False
        fins = obj["metadata"].setdefault("finalizers", [])
        if finalizer not in fins:
            fins.append(finalizer)
        return True

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
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
