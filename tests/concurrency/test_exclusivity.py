"""Node-level exclusivity: a device recorded for one claim is never prepared for another."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dralet.testing.claims import MemoryClaims
from tests.recovery.nodekit import FINALIZER, EngineNode

YIELD_TURNS = 50


class _Barrier:
    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.all_arrived = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_arrived.set()
        await self.all_arrived.wait()


class BarrierClaims(MemoryClaims):
    """Every API call waits until ``parties`` callers made it: the claims' prepares then
    run step by step side by side, as concurrent kubelet pod workers do against a real
    API server."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.gets = _Barrier(parties)
        self.adds = _Barrier(parties)

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        await self.gets.wait()
        return await super().get_claim(namespace, name)

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        self.adds.arrived += 1
        if self.adds.arrived >= self.adds.parties:
            self.adds.all_arrived.set()
        # Let the other claim's prepare run up to its own API call (or, when its checks
        # refuse it first, to its end): a bounded number of event-loop turns, no sleeping.
        for _ in range(YIELD_TURNS):
            if self.adds.all_arrived.is_set():
                break
            await asyncio.sleep(0)
        return await super().add_finalizer(namespace, name, uid, finalizer, current=current)


async def test_second_claim_gets_error_naming_holder_then_succeeds_after_release(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0")
    b = node.add_claim("b", "gpu-0", "gpu-1")
    assert (await node.prepare(a))[a.uid].error == ""

    refused = (await node.prepare(b))[b.uid]
    assert refused.devices == ()
    assert f"device node-a/gpu-0 is still prepared for claim {a.uid}" in refused.error
    node.assert_gone(b)  # nothing of b was touched: no record, spec, device or finalizer
    node.assert_prepared(a, "gpu-0")

    assert await node.unprepare(a) == {a.uid: ""}
    retried = (await node.prepare(b))[b.uid]
    assert retried.error == ""
    assert sorted(d.device for d in retried.devices) == ["gpu-0", "gpu-1"]
    node.assert_prepared(b, "gpu-0", "gpu-1")
    assert await node.findings() == []


async def test_two_claims_racing_for_one_device_in_one_request(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    node.claims = BarrierClaims(parties=2)
    node.restart()
    a = node.add_claim("a", "gpu-1")
    b = node.add_claim("b", "gpu-1")

    outcomes = await node.prepare(a, b)

    winners = [uid for uid, o in outcomes.items() if not o.error]
    assert len(winners) == 1
    (winner,) = (r for r in (a, b) if r.uid in winners)
    (loser,) = (r for r in (a, b) if r.uid not in winners)
    assert f"still prepared for claim {winner.uid}" in outcomes[loser.uid].error
    node.assert_prepared(winner, "gpu-1")
    # The refused claim must not keep our finalizer: nothing would ever remove it, and
    # the ResourceClaim could never be deleted.
    assert FINALIZER not in node.finalizers(loser)
    node.assert_gone(loser)
    assert await node.findings() == []
