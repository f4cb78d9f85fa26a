"""The DRA health service is advertised only when the backend reports health, and a
driver without health is watched quietly by each kubelet release: 1.36 watches every
plugin and logs every failed stream (so it gets an idle stream), 1.37 and 1.38 watch only
what is advertised and stop on Unimplemented."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

import dralet
from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import HealthWatch, PluginConnection
from dralet.node import registration
from dralet.protocol.proto import pluginregistration_v1_pb2
from dralet.testing import running_node
from dralet.testing.claims import NODE
from tests.node.conftest import make_settings

QUICK_RETRY = 0.01
# Long enough for a kubelet retrying every QUICK_RETRY to try many times.
WATCH_FOR = 0.3
DRA_ONLY = list(registration.SUPPORTED_VERSIONS)
RETRIES_SEEN = 3
ERRORS_WITHIN = 10.0


class NoHealthGPUs(SimulatedGPUs):
    """Example GPUs whose backend does not report health; ``from_call`` is the first
    ``health()`` call that says so (1: from the start)."""

    from_call = 1
    calls = 0

    async def health(self) -> Mapping[str, dralet.DeviceHealth]:
        self.calls += 1
        if self.calls >= self.from_call:
            raise dralet.HealthNotSupported
        return await super().health()


@contextlib.asynccontextmanager
async def driver_without_health(root: Path, *, from_call: int = 1) -> AsyncIterator[Any]:
    backend = NoHealthGPUs(state_dir=root / "gpus", node_name=NODE, count=1)
    backend.from_call = from_call
    async with running_node(make_settings(root), backend) as node:
        yield node


async def watch(
    plugin: PluginConnection, kubelet_version: str, *, stops: bool = False
) -> HealthWatch:
    """What a kubelet of ``kubelet_version`` does with ``plugin``'s health for a while
    (until it stops watching, when it ``stops``)."""
    watcher = HealthWatch(plugin, kubelet_version, retry_period=QUICK_RETRY)
    task = asyncio.ensure_future(watcher.run())
    done, _ = await asyncio.wait({task}, timeout=ERRORS_WITHIN if stops else WATCH_FOR)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return watcher


async def test_a_backend_without_health_advertises_no_health_service(tmp_path: Path) -> None:
    async with driver_without_health(tmp_path) as node:
        assert list(node.plugin.info.supported_versions) == DRA_ONLY
        assert not node.driver.reports_health


async def test_a_backend_with_health_advertises_both_versions(tmp_path: Path) -> None:
    backend = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name=NODE, count=1)
    async with running_node(make_settings(tmp_path), backend) as node:
        assert list(node.plugin.info.supported_versions) == [
            *registration.SUPPORTED_VERSIONS,
            *registration.HEALTH_SERVICE_VERSIONS,
        ]


@pytest.mark.parametrize("kubelet_version", ["1.37", "1.38"])
async def test_newer_kubelets_do_not_watch_a_driver_without_health(
    tmp_path: Path, kubelet_version: str
) -> None:
    async with driver_without_health(tmp_path) as node:
        watcher = await watch(node.plugin, kubelet_version, stops=True)
        assert (watcher.attempts, watcher.stopped) == (0, "no health service to watch")


async def test_the_1_36_kubelet_watches_anyway_and_gets_a_quiet_stream(tmp_path: Path) -> None:
    async with driver_without_health(tmp_path) as node:
        watcher = await watch(node.plugin, "1.36")
        assert watcher.service == "v1alpha1.DRAResourceHealth"
        assert (watcher.attempts, watcher.logged_errors, watcher.messages) == (1, [], [])


@pytest.mark.parametrize("kubelet_version", ["1.37", "1.38"])
async def test_health_withdrawn_later_stops_newer_kubelets_on_unimplemented(
    tmp_path: Path, kubelet_version: str
) -> None:
    async with driver_without_health(tmp_path, from_call=2) as node:  # advertised at start
        watcher = await watch(node.plugin, kubelet_version, stops=True)
        assert watcher.attempts == 1 and watcher.logged_errors == []
        assert watcher.stopped == "v1.DRAResourceHealth answered Unimplemented"


# ---- the emulator's kubelets, against a plugin that answers every call Unimplemented


@contextlib.asynccontextmanager
async def unimplemented_plugin(root: Path, advertised: list[str]) -> AsyncIterator[Any]:
    path = root / "dra.sock"
    server = grpc.aio.server()
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    info = pluginregistration_v1_pb2.PluginInfo(
        type="DRAPlugin", name="gpu.example.com", endpoint=str(path)
    )
    info.supported_versions.extend(advertised)
    plugin = PluginConnection(info=info, service="v1.DRAPlugin", registration_socket=path)
    try:
        yield plugin
    finally:
        await plugin.close()
        await server.stop(None)


async def test_the_1_36_kubelet_logs_an_error_every_retry_on_unimplemented(
    tmp_path: Path,
) -> None:
    async with unimplemented_plugin(tmp_path, DRA_ONLY) as plugin:
        watcher = HealthWatch(plugin, "1.36", retry_period=QUICK_RETRY)
        task = asyncio.ensure_future(watcher.run())
        try:
            async with asyncio.timeout(ERRORS_WITHIN):
                while len(watcher.logged_errors) < RETRIES_SEEN:  # noqa: ASYNC110 - polled
                    await asyncio.sleep(QUICK_RETRY)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert watcher.attempts - len(watcher.logged_errors) in (0, 1)  # cancelled mid-stream
    assert watcher.logged_errors[0].startswith(
        "Error receiving from WatchResources stream: UNIMPLEMENTED"
    )
    assert watcher.stopped == ""


@pytest.mark.parametrize("kubelet_version", ["1.37", "1.38"])
async def test_newer_kubelets_stop_on_unimplemented(tmp_path: Path, kubelet_version: str) -> None:
    advertised = [*DRA_ONLY, "v1.DRAResourceHealth"]
    async with unimplemented_plugin(tmp_path, advertised) as plugin:
        watcher = await watch(plugin, kubelet_version, stops=True)
    assert (watcher.attempts, watcher.logged_errors) == (1, [])
    assert watcher.stopped == "v1.DRAResourceHealth answered Unimplemented"


@pytest.mark.parametrize("kubelet_version", ["1.32", "1.34", "1.35"])
async def test_kubelets_before_1_36_do_not_watch(tmp_path: Path, kubelet_version: str) -> None:
    advertised = [*DRA_ONLY, "v1alpha1.DRAResourceHealth"]
    async with unimplemented_plugin(tmp_path, advertised) as plugin:
        watcher = await watch(plugin, kubelet_version, stops=True)
    assert (watcher.attempts, watcher.stopped) == (0, "no health service to watch")
