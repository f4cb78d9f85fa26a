"""A driver running in the test's event loop, on real sockets, files and gRPC."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dralet.drivers.example import SimulatedGPUs
from dralet.node.runner import NodeServer
from dralet.node.settings import DriverSettings
from dralet.testing.kubelet import KubeletEmulator, PluginConnection
from tests.claimfakes import DRIVER, NODE, MemoryClaims


@dataclass
class Node:
    settings: DriverSettings
    backend: SimulatedGPUs
    claims: MemoryClaims
    driver: NodeServer
    kubelet: KubeletEmulator
    plugin: PluginConnection


def make_settings(root: Path, **overrides: object) -> DriverSettings:
    values: dict[str, object] = {
        "driver_name": DRIVER,
        "node_name": NODE,
        "plugin_dir": root / "plugins" / DRIVER,
        "registry_dir": root / "plugins_registry",
        "cdi_dir": root / "cdi",
        "boot_id_path": root / "boot_id",
        "stale_claim_interval": 3600.0,
        "health_interval": 0.05,
        "shutdown_grace": 2.0,
    }
    values.update(overrides)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "boot_id").exists():
        (root / "boot_id").write_text("boot-1\n")
    return DriverSettings(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running_node(
    root: Path, *, gpus: int = 4, claims: MemoryClaims | None = None, **overrides: object
) -> AsyncIterator[Node]:
    """A driver started in this event loop on ``root``, registered with a kubelet emulator."""
    settings = make_settings(root, **overrides)
    backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=gpus)
    claims = claims if claims is not None else MemoryClaims()
    driver = NodeServer(settings, backend, claims=claims)
    await driver.start()
    kubelet = KubeletEmulator(settings.registry_dir)
    try:
        plugin = await kubelet.wait_for_plugin(DRIVER, within=10)
        yield Node(settings, backend, claims, driver, kubelet, plugin)
    finally:
        await kubelet.close()
        await driver.stop()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with running_node(tmp_path) as started:
        yield started
