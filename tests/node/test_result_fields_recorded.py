"""What the allocation result says beyond request, pool and device (consumedCapacity,
tolerations, shareID, fields newer than dralet) is recorded with the claim, so that
``release_claim`` after a restart, with the claim gone from the API, sees the device
exactly as ``prepare_claim`` did (a backend that sized a partition by the consumed
capacity frees the same partition)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.node.quietbackend import QuietBackend

DRIVER = "gpu.example.com"
UID = "5d6f0e3a-1111-4a2b-8c3d-000000000001"
SHARE = "7a1c2f4e-2222-4b3c-9d4e-000000000002"


class Recording(QuietBackend):
    """A shared device (consumable capacity) that records what each call saw."""

    def __init__(self) -> None:
        self.prepared: list[dralet.AllocatedDevice] = []
        self.released: list[dralet.AllocatedDevice] = []

    def devices(self) -> list[dralet.Device]:
        return [dralet.Device(name="gpu-0", allow_multiple_allocations=True)]

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        self.prepared += allocation.devices
        return [dralet.PreparedDevice(edits=dralet.ContainerEdits(env=("A=1",)))]

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        self.released += allocation.devices


async def test_release_after_a_restart_sees_the_device_as_prepare_did(short_tmp: Path) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    claims = MemoryClaims()
    claim = allocated_claim("c", uid=UID, driver=DRIVER, devices=[("r", "gpu-0")])
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result["shareID"] = SHARE
    result["consumedCapacity"] = {"memory": "4Gi"}
    result["tolerations"] = [
        {"key": "example.com/dirty", "operator": "Exists", "effect": "NoSchedule"}
    ]
    result["bindingConditions"] = ["example.com/ready"]  # any field newer than dralet's model
    claims.add(claim)
    first = Recording()
    async with running_node(settings, first, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
    (seen,) = first.prepared
    assert seen.share_id == SHARE
    assert seen.consumed_capacity == {"memory": "4Gi"}
    assert seen.tolerations == (
        {"key": "example.com/dirty", "operator": "Exists", "effect": "NoSchedule"},
    )
    assert seen.extra == {"bindingConditions": ["example.com/ready"]}

    claims.objects.clear()  # deleted from the API while the driver was down
    second = Recording()
    async with running_node(settings, second, claims=claims) as node:
        assert (await node.unprepare(claim)).kubelet_error == ""
    (released,) = second.released
    assert (released.share_id, released.consumed_capacity) == (SHARE, {"memory": "4Gi"})
    assert released.tolerations == seen.tolerations
    assert released.extra == seen.extra
