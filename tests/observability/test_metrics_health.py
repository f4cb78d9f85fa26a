"""Metrics, gRPC health and the DRA resource health stream of a running driver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dralet.protocol.proto import drahealth_v1alpha1_pb2
from dralet.testing.claims import NODE, allocated_claim
from tests.node.conftest import Node, running_node
from tests.node.test_prepare import kclaim


@pytest.fixture
async def observed(tmp_path: Path) -> AsyncIterator[Node]:
    async with running_node(
        tmp_path, gpus=2, metrics_port=0, health_port=0, metrics_host="127.0.0.1"
    ) as started:
        yield started


def sample(exposition: str, name: str, **labels: str) -> float:
    for line in exposition.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()) and (
            head == name or head.startswith(name + "{")
        ):
            return float(value)
    return 0.0


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


async def test_metrics_move_after_prepare_and_unprepare(observed: Node) -> None:
    url = observed.driver.metrics_url
    before = await scrape(url)
    assert sample(before, "dralet_operations_total", operation="prepare", result="success") == 0
    ok = observed.claims.add(allocated_claim("ok"))
    bad = observed.claims.add(allocated_claim("bad", driver="other.example.com"))
    await observed.plugin.prepare([kclaim(ok), kclaim(bad)])
    during = await scrape(url)
    assert sample(during, "dralet_operations_total", operation="prepare", result="success") == 1
    assert sample(during, "dralet_operations_total", operation="prepare", result="error") == 1
    assert sample(during, "dralet_claims_prepared") == 1
    assert (
        sample(
            during, "dralet_operation_duration_seconds_count", operation="prepare", result="success"
        )
        == 1
    )
    await observed.plugin.unprepare([kclaim(ok)])
    after = await scrape(url)
    assert sample(after, "dralet_operations_total", operation="unprepare", result="success") == 1
    assert sample(after, "dralet_claims_prepared") == 0


async def test_grpc_health_on_the_dra_socket_and_the_tcp_port(observed: Node) -> None:
    targets = [f"unix:{observed.settings.dra_socket}", f"127.0.0.1:{observed.driver.health_port}"]
    for target in targets:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, (target, service)


async def test_health_stream_reports_a_device_going_unhealthy(observed: Node) -> None:
    stream = observed.plugin.watch_health()
    try:
        first = await asyncio.wait_for(anext(stream), 10)
        health = {d.device.device_name: d.health for d in first.devices}
        assert health == {
            "gpu-0": drahealth_v1alpha1_pb2.HEALTHY,
            "gpu-1": drahealth_v1alpha1_pb2.HEALTHY,
        }
        assert {d.device.pool_name for d in first.devices} == {NODE}
        (observed.backend.state_dir / "health.json").write_text(json.dumps({"gpu-1": "XID 79"}))
        while True:
            message = await asyncio.wait_for(anext(stream), 10)
            by_name = {d.device.device_name: d for d in message.devices}
            if by_name["gpu-1"].health == drahealth_v1alpha1_pb2.UNHEALTHY:
                break
        assert by_name["gpu-1"].message == "XID 79"
        assert by_name["gpu-0"].health == drahealth_v1alpha1_pb2.HEALTHY
    finally:
        await stream.aclose()
