"""A real driver process whose backend takes 30 s for one device (``--prepare-delay``):
another claim's prepare is answered while that one is still in the backend, and a driver
killed in the middle of the slow prepare rolls it back at its next start."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest

from dralet.apiserver import ApiServer
from dralet.checkpoint.model import ClaimState
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletEmulator
from tests import claimstore
from tests.hostile.conftest import short_root  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

DRIVER = "gpu.example.com"
SLOW_SECONDS = 30
POLL_INTERVAL = 0.02
POLL_ATTEMPTS = 1500


async def _may_fail(call: Coroutine[Any, Any, object]) -> object | None:
    try:
        return await call
    except grpc.aio.AioRpcError:
        return None


async def _eventually(check: Callable[[], bool]) -> None:
    for _ in range(POLL_ATTEMPTS):
        if check():
            return
        await asyncio.sleep(POLL_INTERVAL)
    raise AssertionError("condition not reached within the deadline")


async def test_slow_device_does_not_block_another_claim_and_a_kill_rolls_it_back(
    short_root: Path,  # noqa: F811
) -> None:
    paths = DriverPaths(short_root)

    def state(uid: str) -> ClaimState | None:
        record = claimstore.records(paths.plugin_dir).get(uid)
        return record.state if record is not None else None

    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        args = driver_args(paths, api_url=api.url, extra=["--no-publish"])
        slow_driver = DriverProcess(
            [*args, "--prepare-delay", f"gpu-0={SLOW_SECONDS}"],
            log_path=short_root / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        try:
            slow_driver.start()
            plugin = await kubelet.wait_for_plugin(DRIVER)
            slow = cluster.allocate_claim("slow", [("gpu", "gpu-0")])
            fast = cluster.allocate_claim("fast", [("gpu", "gpu-1")])
            async with asyncio.TaskGroup() as group:
                pending = group.create_task(_may_fail(plugin.prepare([slow])))
                await _eventually(lambda: state(slow.uid) == ClaimState.PREPARE_STARTED)

                answered = await plugin.prepare([fast])

                assert answered.kubelet_error == "", slow_driver.log()
                assert not pending.done()  # the slow claim is still in its 30 s backend call
                assert state(slow.uid) == ClaimState.PREPARE_STARTED
                assert state(fast.uid) == ClaimState.PREPARE_COMPLETED
                await slow_driver.kill()  # the driver dies during the slow prepare
            assert pending.result() is None  # the kubelet saw the call fail
            await kubelet.close()

            restarted = DriverProcess(args, log_path=short_root / "driver-2.log")
            restarted.start()
            try:
                plugin = await kubelet.wait_for_plugin(DRIVER)
                assert state(slow.uid) is None  # rolled back at start
                assert DRIVER + "/prepared" not in cluster.finalizers(slow)
                gpus = SimulatedGPUs(state_dir=paths.state_dir, node_name=paths.node_name)
                assert gpus.in_use() == {"gpu-1": fast.uid}
                retried = await plugin.prepare([slow])  # the kubelet's retry, now fast
                assert retried.kubelet_error == "", restarted.log()
            finally:
                await restarted.terminate()
        finally:
            await kubelet.close()
            await slow_driver.terminate()
