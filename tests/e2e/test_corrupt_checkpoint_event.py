"""A driver that fails closed on a corrupt checkpoint tells operators with a Node Event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator
from tests import claimstore

pytestmark = pytest.mark.e2e


async def test_corrupt_checkpoint_is_reported_as_a_warning_event(short_tmp: Path) -> None:
    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        node = cluster.add_node()
        paths = DriverPaths(short_tmp)
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish"]),
            log_path=short_tmp / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        try:
            driver.start()
            plugin = await kubelet.wait_for_plugin("gpu.example.com")
            ref = cluster.allocate_claim("held", [("gpu", "gpu-0")])
            assert (await plugin.prepare([ref])).kubelet_error == ""
            await driver.terminate()
            await kubelet.close()
            claimstore.damage_store(paths.store)
            assert api.list("Event", namespace="default") == []

            driver.start()
            plugin = await kubelet.wait_for_plugin("gpu.example.com")
            deadline = time.monotonic() + 10
            while not (events := api.list("Event", namespace="default")):
                assert time.monotonic() < deadline, driver.log()
                await asyncio.sleep(0.05)
            (event,) = events
            assert (event["type"], event["reason"]) == ("Warning", "CheckpointCorrupt")
            assert event["involvedObject"]["kind"] == "Node"
            assert event["involvedObject"]["uid"] == node["metadata"]["uid"]
            assert "not a database" in event["message"]
            assert driver.alive  # failing closed, not crash-looping
        finally:
            await kubelet.close()
            await driver.terminate()
