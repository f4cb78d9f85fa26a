"""A driver node running in the test's event loop: the author's backend behind the real
claim engine, gRPC servers and files, registered with a kubelet emulator that calls it
over its unix sockets as a kubelet would.

    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0")]))
    async with running_node(node_settings(tmp_path), MyBackend(...), claims=claims) as node:
        result = await node.prepare(claim)
        assert not result.kubelet_error
        assert (await node.unprepare(claim)).kubelet_error == ""
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dralet.kubelet import (
    KubeletClaim,
    KubeletEmulator,
    PluginConnection,
    PrepareResult,
    UnprepareResult,
)
from dralet.node.backend import ClaimBackend
from dralet.node.claims.calls import ClaimSource
from dralet.node.runner import NodeServer
from dralet.node.settings import DriverSettings
from dralet.testing.claims import DRIVER, NODE, MemoryClaims

__all__ = ["RunningNode", "kubelet_claim", "node_settings", "running_node"]

REGISTRATION_WITHIN = 10.0
"""Seconds the kubelet emulator waits for the driver's registration socket."""


def node_settings(
    root: Path, *, driver_name: str = DRIVER, node_name: str = NODE, **overrides: Any
) -> DriverSettings:
    """Settings for a node whose kubelet directories, CDI directory and boot id all live
    under ``root`` (made if missing), with quick test timings (health every 50 ms, 2 s
    shutdown grace, no stale-claim sweep within a test); ``overrides`` are any other
    ``DriverSettings`` fields."""
    values: dict[str, Any] = {
        "driver_name": driver_name,
        "node_name": node_name,
        "plugin_dir": root / "plugins" / driver_name,
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
    return DriverSettings(**values)


def kubelet_claim(claim: Mapping[str, Any]) -> KubeletClaim:
    """How the kubelet names ``claim`` (a ResourceClaim dict) in its calls."""
    meta = claim["metadata"]
    return KubeletClaim(str(meta["namespace"]), str(meta["uid"]), str(meta["name"]))


@dataclass
class RunningNode:
    """A started driver and the kubelet emulator it registered with."""

    settings: DriverSettings
    backend: ClaimBackend
    claims: ClaimSource
    driver: NodeServer
    kubelet: KubeletEmulator
    plugin: PluginConnection
    """The registered plugin, called over the DRA service the kubelet picked."""

    async def prepare(self, *claims: Mapping[str, Any]) -> PrepareResult:
        """NodePrepareResources for these claims in one call, judged as the kubelet does."""
        return await self.plugin.prepare([kubelet_claim(c) for c in claims])

    async def unprepare(self, *claims: Mapping[str, Any]) -> UnprepareResult:
        """NodeUnprepareResources for these claims in one call, judged as the kubelet does."""
        return await self.plugin.unprepare([kubelet_claim(c) for c in claims])

    async def settled(self) -> None:
        """Wait for the work that follows the answers given so far: the finalizer
        removals an unprepare owes once the kubelet has its answer."""
        await self.driver.engine.settled()


@contextlib.asynccontextmanager
async def running_node(
    settings: DriverSettings,
    backend: ClaimBackend,
    *,
    claims: ClaimSource | None = None,
    kubelet_version: str = "1.34",
) -> AsyncIterator[RunningNode]:
    """Start a driver for ``backend`` in this event loop, wait until a kubelet of
    ``kubelet_version`` registered it, yield it, and stop both (staged shutdown) on exit.
    ``claims`` defaults to an empty ``MemoryClaims``."""
    source = claims if claims is not None else MemoryClaims()
    driver = NodeServer(settings, backend, claims=source)
    await driver.start()
    kubelet = KubeletEmulator(settings.registry_dir, kubelet_version=kubelet_version)
    try:
        plugin = await kubelet.wait_for_plugin(settings.driver_name, within=REGISTRATION_WITHIN)
        yield RunningNode(settings, backend, source, driver, kubelet, plugin)
    finally:
        await kubelet.close()
        await driver.stop()
