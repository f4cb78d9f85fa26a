"""A driver running in the test's event loop, on real sockets, files and gRPC."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dralet import testing
from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletEmulator, PluginConnection
from dralet.node.runner import NodeServer
from dralet.node.settings import DriverSettings
from dralet.testing.claims import NODE, MemoryClaims


@dataclass
class Node:
    settings: DriverSettings
    backend: SimulatedGPUs
    claims: MemoryClaims
    driver: NodeServer
    kubelet: KubeletEmulator
    plugin: PluginConnection


def make_settings(root: Path, **overrides: object) -> DriverSettings:
    return testing.node_settings(root, **overrides)


@contextlib.asynccontextmanager
async def running_node(
    root: Path, *, gpus: int = 4, claims: MemoryClaims | None = None, **overrides: object
) -> AsyncIterator[Node]:
    """A driver of simulated GPUs started in this event loop on ``root``, registered with a
    kubelet emulator (``dralet.testing.running_node``)."""
    settings = make_settings(root, **overrides)
    backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=gpus)
    claims = claims if claims is not None else MemoryClaims()
    async with testing.running_node(settings, backend, claims=claims) as started:
        yield Node(settings, backend, claims, started.driver, started.kubelet, started.plugin)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with running_node(tmp_path) as started:
        yield started
