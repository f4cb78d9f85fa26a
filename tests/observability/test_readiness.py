"""The "readiness" gRPC health service: serving once registered and published, no sooner.

A DaemonSet's readinessProbe asks it, so a driver pod is Ready only when the kubelet
can call it and the scheduler can see its devices.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletEmulator
from dralet.node.runner import READINESS_SERVICE, NodeServer
from dralet.testing.claims import DRIVER, NODE, MemoryClaims
from tests.node.conftest import make_settings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WAIT_S = 10


async def statuses(port: int) -> AsyncIterator[int]:
    """Every readiness status the health port reports, first the current one."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        async for reply in stub.Watch(health_pb2.HealthCheckRequest(service=READINESS_SERVICE)):
            yield reply.status


@contextlib.asynccontextmanager
async def started(root: Path, published: asyncio.Event) -> AsyncIterator[NodeServer]:
    settings = make_settings(root, health_port=0, metrics_host="127.0.0.1")
    backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=1)
    driver = NodeServer(settings, backend, claims=MemoryClaims(), ready_after=(published,))
    await driver.start()
    try:
        yield driver
    finally:
        await driver.stop()


async def test_not_ready_until_the_kubelet_registered_it(tmp_path: Path) -> None:
    published = asyncio.Event()
    published.set()
    async with started(tmp_path, published) as driver:
        assert driver.health_port is not None
        seen = statuses(driver.health_port)
        kubelet = KubeletEmulator(driver.settings.registry_dir)
        try:
            async with asyncio.timeout(WAIT_S):
                assert await anext(seen) == NOT_SERVING  # published, not registered
                await kubelet.wait_for_plugin(DRIVER, within=WAIT_S)
                assert await anext(seen) == SERVING
        finally:
            await seen.aclose()
            await kubelet.close()


async def test_not_ready_until_published_and_alive_meanwhile(tmp_path: Path) -> None:
    published = asyncio.Event()
    async with started(tmp_path, published) as driver:
        assert driver.health_port is not None
        kubelet = KubeletEmulator(driver.settings.registry_dir)
        seen = statuses(driver.health_port)
        try:
            async with asyncio.timeout(WAIT_S):
                await kubelet.wait_for_plugin(DRIVER, within=WAIT_S)
                await driver.registration.registered.wait()
                assert await anext(seen) == NOT_SERVING  # registered, not published
                alive = await driver.health.Check(health_pb2.HealthCheckRequest(service=""), None)
                assert alive.status == SERVING  # liveness: alive all along, only not ready
                published.set()
                assert await anext(seen) == SERVING
        finally:
            await seen.aclose()
            await kubelet.close()
