"""Claim records that cannot be trusted: the driver fails closed without crash-looping.

A whole store that cannot be read (the record database, or an older release's
``checkpoint.json`` met on upgrade): the driver stays up (health answers, the process
keeps running), refuses new prepares with a clear per-claim error, still unprepares what
the CDI directory and the backend prove was prepared, keeps the bad file (and a copy
aside for forensics), and counts it in ``dralet_checkpoint_errors``. It never starts
silently empty. One record that fails its checksum fails closed for that claim alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dralet.apiserver import ApiServer
from dralet.checkpoint import codec
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator
from dralet.testing.claims import MemoryClaims
from tests import claimstore, owed
from tests.hostile.conftest import (
    add_claim,
    allowed_dirs,
    assert_written_only_inside,
    node_with_one_claim,
    running_node,
)

FINALIZER = "gpu.example.com/prepared"
REGISTER_WITHIN = 30.0


def _future(raw: bytes) -> bytes:
    data = json.loads(json.loads(raw)["data"])
    data["apiVersion"] = "checkpoint.dralet.dev/v99"
    text = json.dumps(data)
    return json.dumps({"data": text, "checksum": codec.checksum(text)}).encode()


def _wrong_checksum(raw: bytes) -> bytes:
    envelope = json.loads(raw)
    envelope["checksum"] = "sha256:" + "0" * 64
    return json.dumps(envelope).encode()


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda raw: raw[: len(raw) // 2],
    "zero-length": lambda raw: b"",
    "wrong-checksum": _wrong_checksum,
    "future-version": _future,
}


def _metric(exposition: bytes, name: str) -> float:
    for line in exposition.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_driver_fails_closed_on_a_damaged_checkpoint(short_root: Path, damage: str) -> None:
    root = short_root / "node"
    claims = MemoryClaims()
    checkpoint, prepared = await node_with_one_claim(
        root, claims=claims, released=False, legacy=True
    )
    bad = DAMAGE[damage](checkpoint.read_bytes())
    checkpoint.write_bytes(bad)

    async with running_node(root, claims=claims) as node:
        assert node.driver.engine.fail_closed
        health = health_pb2_grpc.HealthStub(node.plugin.channel())
        answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING  # liveness: no restart
        assert _metric(node.driver.metrics.exposition(), "dralet_checkpoint_errors_total") >= 1
        assert checkpoint.read_bytes() == bad  # never silently replaced by an empty one
        kept = list(checkpoint.parent.glob("checkpoint.json.corrupt-*"))
        assert [k.read_bytes() for k in kept] == [bad]

        fresh = add_claim(node, "fresh", "gpu-2")
        refused = await node.plugin.prepare([fresh])
        assert "not preparing new claims" in refused.claims[fresh.uid].error
        assert "unusable" in refused.claims[fresh.uid].error
        assert node.backend.in_use() == {"gpu-1": prepared.uid}

        # What the CDI dir and the backend prove was prepared is still unprepared.
        assert (await node.plugin.unprepare([prepared])).kubelet_error == ""
        assert list(node.settings.cdi_dir.iterdir()) == []
        assert node.backend.in_use() == {}
        assert FINALIZER not in claims.finalizers("default", "prepared")
        assert_written_only_inside(short_root, allowed_dirs(node))


async def test_nothing_prepared_and_damaged_checkpoint_is_reset_with_a_copy_kept(
    short_root: Path,
) -> None:
    root = short_root / "node"
    checkpoint, _ = await node_with_one_claim(
        root, claims=MemoryClaims(), released=True, legacy=True
    )
    checkpoint.write_bytes(b"{garbage")

    async with running_node(root) as node:
        assert not node.driver.engine.fail_closed  # provably nothing to lose
        assert node.driver.recovery is not None
        assert node.driver.recovery.count("corrupt-checkpoint-reset") == 1
        assert [k.read_bytes() for k in checkpoint.parent.glob("checkpoint.json.corrupt-*")] == [
            b"{garbage"
        ]
        assert _metric(node.driver.metrics.exposition(), "dralet_checkpoint_errors_total") == 1
        again = add_claim(node, "again", "gpu-0")
        assert (await node.plugin.prepare([again])).kubelet_error == ""


async def test_a_damaged_record_fails_closed_for_that_claim_alone(node_root: Path) -> None:
    async with running_node(node_root) as node:
        damaged = add_claim(node, "damaged", "gpu-0")
        healthy = add_claim(node, "healthy", "gpu-1")
        assert (await node.plugin.prepare([damaged, healthy])).kubelet_error == ""
        claimstore.damage_record(node.settings.store_path, damaged.uid)

        again = await node.plugin.prepare([damaged, healthy])
        assert "not preparing new claims" in again.claims[damaged.uid].error
        assert "checksum mismatch" in again.claims[damaged.uid].error
        assert again.claims[healthy.uid].error == ""
        assert not node.driver.engine.fail_closed  # the node as a whole still serves
        # Its device stays held: another claim allocated it meanwhile is refused.
        thief = add_claim(node, "thief", "gpu-0")
        refused = await node.plugin.prepare([thief])
        assert damaged.uid in refused.claims[thief.uid].error
        fresh = add_claim(node, "fresh", "gpu-2")
        assert (await node.plugin.prepare([fresh])).kubelet_error == ""

        # Unprepare works from what the CDI dir and the backend prove, then forgets it.
        assert (await node.plugin.unprepare([damaged])).kubelet_error == ""
        assert node.backend.in_use() == {"gpu-1": healthy.uid, "gpu-2": fresh.uid}
        assert FINALIZER not in node.claims.finalizers("default", "damaged")
        assert damaged.uid not in node.driver.engine.known_claims()
        assert (await node.plugin.prepare([thief])).kubelet_error == ""


@pytest.fixture
def node_root(short_root: Path) -> Path:
    return short_root / "node"


@pytest.mark.e2e
@pytest.mark.parametrize("content", [b"{not a database", b""], ids=["garbage", "empty"])
async def test_driver_process_stays_up_on_a_corrupt_checkpoint(
    short_root: Path, content: bytes
) -> None:
    paths = DriverPaths(short_root)
    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish"]),
            log_path=short_root / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        try:
            driver.start()
            plugin = await kubelet.wait_for_plugin("gpu.example.com", within=REGISTER_WITHIN)
            ref = cluster.allocate_claim("train", [("gpu", "gpu-1")])
            assert (await plugin.prepare([ref])).kubelet_error == "", driver.log()
            await driver.kill()
            await kubelet.close()
            claimstore.damage_store(paths.store, content)

            driver.start()
            plugin = await kubelet.wait_for_plugin("gpu.example.com", within=REGISTER_WITHIN)
            other = cluster.allocate_claim("other", [("gpu", "gpu-2")])
            refused = await plugin.prepare([other])
            assert "not preparing new claims" in refused.claims[other.uid].error
            assert (await plugin.unprepare([ref])).kubelet_error == ""
            assert await owed.settled_finalizers(cluster, ref) == []
            assert list(paths.cdi_dir.glob("*.json")) == []
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # it keeps running: no exit, no crash loop
                assert driver.alive, driver.log()
                await asyncio.sleep(0.05)
            health = health_pb2_grpc.HealthStub(plugin.channel())
            answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            assert "failing closed" in driver.log()
        finally:
            await kubelet.close()
            await driver.terminate()
    assert_written_only_inside(
        short_root,
        [
            paths.plugin_dir,
            paths.registry_dir,
            paths.cdi_dir,
            paths.state_dir,
            paths.root / "driver.log",
        ],
    )
