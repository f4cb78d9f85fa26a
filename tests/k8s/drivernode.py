"""The node the end-to-end and RBAC tests share: a Ready Node, the example driver running
as ``dralet run`` with deploy/'s ServiceAccount, its ResourceSlice published, and the
kubelet emulator registered with it."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dralet import kube
from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator, NodeHeartbeat, PluginConnection
from tests.k8sapi import ClusterApi

DRIVER = "gpu.example.com"
NODE = "node-a"
WAIT = 60.0


async def eventually(check: Callable[[], Any], what: str, within: float = WAIT) -> Any:
    """Poll until ``check()`` is truthy; its value."""
    deadline = time.monotonic() + within
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within}s: {what}")
        await asyncio.sleep(0.1)
    return value


@dataclass
class Node:
    api: ClusterApi
    paths: DriverPaths
    driver: DriverProcess
    kubelet: KubeletEmulator
    plugin: PluginConnection
    started: datetime.datetime
    """When the fixture began: the API server's audit events of this node's driver come
    after it, and other tests' before (they share the driver's ServiceAccount)."""

    async def restart_driver(self, *extra: str) -> None:
        """SIGTERM the driver and start it again (with ``extra`` arguments)."""
        await self.driver.terminate()
        await self.kubelet.close()
        self.driver.args = [*self.driver.args, *extra]
        self.driver.start()
        self.plugin = await self.kubelet.wait_for_plugin(DRIVER)


@pytest.fixture
async def node(k8s_api: ClusterApi, short_tmp: Path) -> AsyncIterator[Node]:
    # The driver's kubeconfig first: making it may skip the test (no helm to render the
    # chart's ServiceAccount), which must leave no heartbeat running.
    started = datetime.datetime.now(datetime.UTC)
    kubeconfig = k8s_api.driver_kubeconfig()
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        heartbeat = asyncio.create_task(NodeHeartbeat(admin, NODE).run())
        paths = DriverPaths(short_tmp, driver_name=DRIVER, node_name=NODE)
        driver = DriverProcess(
            driver_args(paths, api_url=None, extra=["--kubeconfig", str(kubeconfig)]),
            log_path=short_tmp / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version=k8s_api.kubernetes_version)
        try:
            await eventually(lambda: k8s_api.get("Node", NODE), "node registered")
            k8s_api.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": DRIVER},
                    "spec": {
                        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
                    },
                }
            )
            driver.start()
            plugin = await kubelet.wait_for_plugin(DRIVER)
            await eventually(
                lambda: k8s_api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}"),
                "the driver's ResourceSlice",
            )
            k8s_api.wait_for_default_service_account()
            yield Node(k8s_api, paths, driver, kubelet, plugin, started)
        finally:
            await kubelet.close()
            await driver.terminate()
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
