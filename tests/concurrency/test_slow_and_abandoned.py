"""One slow claim never holds up another, and a prepare the kubelet gave up on followed by
its unprepare leaves the node clean, whichever of the two finishes first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from dralet.checkpoint.model import ClaimState
from dralet.kubelet import KubeletClaim, KubeletEmulator
from dralet.node.runner import NodeServer
from dralet.testing.claims import DRIVER
from tests.hostile.conftest import short_root  # noqa: F401 - fixture
from tests.recovery.nodekit import FINALIZER, EngineNode, GatedBackend

POLL_INTERVAL = 0.01
POLL_ATTEMPTS = 1000
GIVE_UP_AFTER = 0.2
"""The emulated kubelet's deadline in these tests (the real one is 45 s)."""


def kclaim(node: EngineNode, name: str) -> KubeletClaim:
    ref = node.refs[name]
    return KubeletClaim(ref.namespace, ref.uid, ref.name)


@pytest.fixture
async def gated(short_root: Path) -> AsyncIterator[tuple[EngineNode, GatedBackend, NodeServer]]:  # noqa: F811
    node = EngineNode.create(short_root)
    gate = asyncio.Event()
    backend = GatedBackend(4, gates={"gpu-0": gate})
    driver = NodeServer(node.settings, backend, claims=node.claims)
    node.backend, node.engine = backend, driver.engine
    await driver.start()
    try:
        yield node, backend, driver
    finally:
        gate.set()
        await driver.stop()


async def test_slow_backend_prepare_does_not_delay_another_claim(
    gated: tuple[EngineNode, GatedBackend, NodeServer],
) -> None:
    node, backend, _ = gated
    slow = node.add_claim("slow", "gpu-0")
    fast = node.add_claim("fast", "gpu-1")
    kubelet = KubeletEmulator(node.settings.registry_dir)
    try:
        plugin = await kubelet.wait_for_plugin(DRIVER)
        async with asyncio.TaskGroup() as group:
            slow_call = group.create_task(plugin.prepare([kclaim(node, "slow")]))
            await backend.entered["gpu-0"].wait()  # the slow claim is inside the backend
            record = node.record(slow)
            assert record is not None
            assert record.state == ClaimState.PREPARE_STARTED  # its intent is committed

            result = await plugin.prepare([kclaim(node, "fast")])

            assert result.kubelet_error == ""
            assert not backend.gates["gpu-0"].is_set()  # the slow one is still in the backend
            assert backend.events == [
                "prepare-start slow gpu-0",
                "prepare-start fast gpu-1",
                "prepare-done fast gpu-1",
            ]
            node.assert_prepared(fast, "gpu-1")
            backend.gates["gpu-0"].set()
        assert slow_call.result().kubelet_error == ""
        node.assert_prepared(slow, "gpu-0")
    finally:
        await kubelet.close()


@pytest.mark.parametrize("first", ["prepare-finishes-first", "unprepare-arrives-first"])
async def test_abandoned_prepare_then_unprepare_leaves_the_node_clean(
    gated: tuple[EngineNode, GatedBackend, NodeServer], first: str
) -> None:
    node, backend, driver = gated
    claim = node.add_claim("c", "gpu-0")
    kubelet = KubeletEmulator(node.settings.registry_dir, call_timeout=GIVE_UP_AFTER)
    try:
        plugin = await kubelet.wait_for_plugin(DRIVER)
        with pytest.raises(grpc.aio.AioRpcError) as gave_up:
            await plugin.prepare([kclaim(node, "c")])
        assert gave_up.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert backend.entered["gpu-0"].is_set()  # the driver is still working on it

        plugin.call_timeout = 30.0
        if first == "prepare-finishes-first":
            backend.gates["gpu-0"].set()
            await _eventually(lambda: _state(node, claim.uid) == ClaimState.PREPARE_COMPLETED)
            result = await plugin.unprepare([kclaim(node, "c")])
        else:
            async with asyncio.TaskGroup() as group:
                unprepare = group.create_task(plugin.unprepare([kclaim(node, "c")]))
                # Both calls are inside the driver: the unprepare waits on the claim lock.
                await _eventually(lambda: len(driver.engine.work) == 2)
                backend.gates["gpu-0"].set()
            result = unprepare.result()

        assert result.kubelet_error == ""
        await driver.engine.settled()  # the finalizer removal follows the answer
        node.assert_gone(claim)
        assert FINALIZER not in node.finalizers(claim)
        assert list(node.settings.cdi_dir.iterdir()) == []
        assert await node.findings() == []
    finally:
        await kubelet.close()


def _state(node: EngineNode, uid: str) -> ClaimState | None:
    record = node.checkpoint().claims.get(uid)
    return record.state if record is not None else None


async def _eventually(check: Callable[[], bool]) -> None:
    for _ in range(POLL_ATTEMPTS):
        if check():
            return
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError("condition not reached within the deadline")
