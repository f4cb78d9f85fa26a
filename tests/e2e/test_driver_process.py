"""The driver as a real separate process, driven by the kubelet emulator, with claims
from the API stand-in over HTTP: registration, idempotency across SIGKILL, SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import socket
import stat
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator
from tests import owed

pytestmark = pytest.mark.e2e

DRIVER = "gpu.example.com"


@dataclass
class Stack:
    api: ApiServer
    cluster: ControlPlane
    paths: DriverPaths
    driver: DriverProcess
    kubelet: KubeletEmulator


@pytest.fixture(params=["1.34", "1.32"])
async def stack(request: pytest.FixtureRequest, short_tmp: Path) -> AsyncIterator[Stack]:
    async with ApiServer(kubernetes_version=request.param) as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        paths = DriverPaths(short_tmp)
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish"]),
            log_path=short_tmp / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version=request.param)
        try:
            yield Stack(api, cluster, paths, driver, kubelet)
        finally:
            await kubelet.close()
            await driver.terminate()


def _listening(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


async def test_registration_order_contents_and_permissions(stack: Stack) -> None:
    stack.driver.start()
    deadline = time.monotonic() + 30
    while not stack.paths.registration_socket.exists():
        assert time.monotonic() < deadline and stack.driver.alive, stack.driver.log()
        await asyncio.sleep(0.001)
    # The instant the registration socket appears, the DRA socket must already listen.
    assert _listening(stack.paths.dra_socket)
    plugin = await stack.kubelet.wait_for_plugin(DRIVER)
    info = plugin.info
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert info.endpoint == str(stack.paths.dra_socket) and Path(info.endpoint).is_absolute()
    assert list(info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    expected = "v1.DRAPlugin" if stack.kubelet.kubelet_version == "1.34" else "v1beta1.DRAPlugin"
    assert plugin.service == expected
    for path in (stack.paths.dra_socket, stack.paths.registration_socket, stack.paths.checkpoint):
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(stack.paths.plugin_dir.stat().st_mode) == 0o700


async def test_prepare_survives_sigkill_and_sigterm_removes_sockets(stack: Stack) -> None:
    stack.paths.plugin_dir.mkdir(parents=True)
    stack.paths.registry_dir.mkdir(parents=True)
    stack.paths.dra_socket.write_text("stale")  # a leftover from a crash
    stack.driver.start()
    plugin = await stack.kubelet.wait_for_plugin(DRIVER)
    ref = stack.cluster.allocate_claim("train", [("gpu", "gpu-1"), ("gpu", "gpu-2")])
    first = await plugin.prepare([ref])
    assert first.kubelet_error == "", stack.driver.log()
    assert stack.cluster.finalizers(ref) == [f"{DRIVER}/prepared"]

    assert await stack.driver.kill() == -9
    await stack.kubelet.close()
    stack.driver.start()
    plugin = await stack.kubelet.wait_for_plugin(DRIVER)
    again = await plugin.prepare([ref])
    assert again.claims == first.claims
    spec = json.loads((stack.paths.cdi_dir / f"{DRIVER}-claim_{ref.uid}.json").read_text())
    assert len(spec["devices"]) == 2

    assert (await plugin.unprepare([ref])).kubelet_error == ""
    assert await owed.settled_finalizers(stack.cluster, ref) == []
    assert not list(stack.paths.cdi_dir.glob("*.json"))

    assert await stack.driver.terminate() == 0, stack.driver.log()
    assert not stack.paths.dra_socket.exists()
    assert not stack.paths.registration_socket.exists()
