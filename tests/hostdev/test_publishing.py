"""hostdev behind ``dralet.Driver`` with a 1.37 API: a device plugged in is published
without waiting for the resync, and a device unplugged while a claim holds it stays
published with the unhealthy taint (device taints are on by default since 1.36)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dralet
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane
from dralet.drivers.hostdev import HostDevices, load_config
from dralet.kubelet import KubeletEmulator
from dralet.testing import node_settings
from tests.hostdev.fakehost import FakeHost

DRIVER = "hostdev.example.com"
WITHIN = 20.0


async def _until(check: Callable[[], Any], what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN
    while not (found := check()):
        if loop.time() > deadline:
            raise AssertionError(f"not within {WITHIN}s: {what}")
        await asyncio.sleep(0.05)
    return found


async def test_hot_plug_publishes_and_unplug_while_held_taints(
    host: FakeHost, short_root: Path
) -> None:
    host.node("acc0", (1, 3))
    async with ApiServer(kubernetes_version="1.37") as api:
        cluster = ControlPlane(api, driver_name=DRIVER)
        cluster.add_node()
        driver_settings = node_settings(short_root, driver_name=DRIVER)
        settings = dralet.Settings(
            driver=driver_settings,
            api=dralet.ApiSettings(url=api.url),
            publishing=dralet.PublisherSettings(resync_period=3600, health_poll_period=0.05),
        )
        backend = HostDevices(
            load_config(host.config(f"  - name: acc\n    match: {{paths: ['{host.dev}/acc*']}}\n"))
        )

        def devices() -> dict[str, dict[str, Any]]:
            return {
                d["name"]: d
                for s in api.list("ResourceSlice")
                for d in s["spec"].get("devices", ())
            }

        async with dralet.Driver(backend, settings):
            kubelet = KubeletEmulator(driver_settings.registry_dir, kubelet_version="1.37")
            try:
                plugin = await kubelet.wait_for_plugin(DRIVER, within=WITHIN)
                await _until(lambda: "acc-acc0" in devices(), "acc0 published")
                host.node("acc1", (1, 5))
                await _until(lambda: "acc-acc1" in devices(), "acc1 published after hot-plug")

                claim = cluster.allocate_claim("a", [("r", "acc-acc0")])
                assert (await plugin.prepare([claim])).kubelet_error == ""
                host.unplug("acc0")
                tainted = await _until(
                    lambda: devices().get("acc-acc0", {}).get("taints"), "acc0 tainted"
                )
                assert tainted == [{"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule"}]
                assert backend.devices_in_use() == {"acc-acc0": claim.uid}
                assert (await plugin.unprepare([claim])).kubelet_error == ""
                await _until(lambda: "acc-acc0" not in devices(), "acc0 gone once released")
            finally:
                await kubelet.close()
        await backend.aclose()
