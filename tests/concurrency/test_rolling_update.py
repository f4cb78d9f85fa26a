"""Two driver processes on one plugin directory, as during a rolling update (the second
with ``--pod-uid``): prepare and unprepare of the same claims hammered through both never
interleave on one claim or on the checkpoint; the audit finds nothing afterwards."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from dralet.apiserver import ApiServer
from dralet.cdi.store import SpecStore
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletClaim, KubeletEmulator, KubeletError, PluginConnection
from dralet.node import audit
from dralet.node.settings import DriverSettings
from tests import claimstore
from tests.hostile.conftest import short_root  # noqa: F401 - fixture

pytestmark = pytest.mark.e2e

DRIVER = "gpu.example.com"
NEW_POD_UID = "5f1c9a77-2b1e-4d3a-9c55-0d8e6f1a2b3c"
ROUNDS = 12
RACE_CHANCE = 0.4
SEED = 7
GPUS = 8
REGISTER_POLL_INTERVAL = 0.02
REGISTER_POLLS = 1500


@dataclass
class TwoDrivers:
    api: ApiServer
    cluster: ControlPlane
    paths: DriverPaths
    old: PluginConnection
    new: PluginConnection
    processes: tuple[DriverProcess, DriverProcess]


class ApiClaims:
    def __init__(self, api: ApiServer) -> None:
        self.api = api

    async def list_claims(self) -> list[dict[str, object]]:
        return self.api.list("ResourceClaim")


async def _register(
    kubelet: KubeletEmulator, socket: Path, process: DriverProcess
) -> PluginConnection:
    """Register as the kubelet does: the socket file exists once it is bound, which is
    before the server answers on it, so a refused attempt is retried, not a failure."""
    last_error: Exception | None = None
    for _ in range(REGISTER_POLLS):
        assert process.alive, process.log()
        if socket.is_socket():  # noqa: ASYNC240 - a stat per poll, on a local tmpfs path
            try:
                return await kubelet.register(socket)
            except (grpc.aio.AioRpcError, KubeletError) as exc:
                last_error = exc
        await asyncio.sleep(REGISTER_POLL_INTERVAL)
    raise AssertionError(f"{socket} never answered ({last_error}): {process.log()}")


@pytest.fixture
async def two(short_root: Path) -> AsyncIterator[TwoDrivers]:  # noqa: F811
    paths = DriverPaths(short_root)
    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        base = driver_args(paths, api_url=api.url, gpus=GPUS, extra=["--no-publish"])
        old = DriverProcess(base, log_path=short_root / "old.log")
        new = DriverProcess([*base, "--pod-uid", NEW_POD_UID], log_path=short_root / "new.log")
        kubelet = KubeletEmulator(paths.registry_dir)
        try:
            old.start()
            old_plugin = await _register(kubelet, paths.registration_socket, old)
            new.start()
            new_socket = paths.registry_dir / f"{DRIVER}-{NEW_POD_UID}-reg.sock"
            new_plugin = await _register(kubelet, new_socket, new)
            assert old_plugin.endpoint != new_plugin.endpoint
            yield TwoDrivers(api, cluster, paths, old_plugin, new_plugin, (old, new))
        finally:
            await kubelet.close()
            await old.terminate()
            await new.terminate()


async def test_two_instances_never_interleave_on_a_claim_or_the_checkpoint(
    two: TwoDrivers,
) -> None:
    rng = random.Random(SEED)
    refs = [two.cluster.allocate_claim(f"c{i}", [("gpu", f"gpu-{i}")]) for i in range(GPUS)]
    instances = (two.old, two.new)
    specs = SpecStore(two.paths.cdi_dir, f"{DRIVER}/claim")
    gpus = SimulatedGPUs(state_dir=two.paths.state_dir, node_name=two.paths.node_name, count=GPUS)

    def consistent(ref: KubeletClaim, device: str) -> None:
        """All of the claim or none of it: record, spec and device agree (a Released
        record is a claim torn down whose finalizer removal is still owed)."""
        record = claimstore.records(two.paths.plugin_dir).get(ref.uid)
        held = gpus.in_use().get(device) == ref.uid
        if record is None or record.state == "Released":
            assert (specs.exists(ref.uid), held) == (False, False)
        else:
            assert record.state == "PrepareCompleted"
            assert (specs.exists(ref.uid), held) == (True, True)

    async def hammer(ref: KubeletClaim, device: str) -> None:
        for _ in range(ROUNDS):
            first, second = rng.sample(instances, 2)
            if rng.random() < RACE_CHANCE:
                # Prepare through one instance while the other unprepares: serialized
                # on the claim, it ends all prepared or all gone, never half.
                raced = await asyncio.gather(first.prepare([ref]), second.unprepare([ref]))
                assert [r.kubelet_error for r in raced] == ["", ""]
            else:
                both = await asyncio.gather(first.prepare([ref]), second.prepare([ref]))
                assert [r.kubelet_error for r in both] == ["", ""]
                assert both[0].claims == both[1].claims  # one preparation, seen by both
            consistent(ref, device)
            assert (await rng.choice(instances).unprepare([ref])).kubelet_error == ""
            consistent(ref, device)

    await asyncio.gather(*(hammer(ref, f"gpu-{i}") for i, ref in enumerate(refs)))
    for ref in refs[:2]:
        assert (await rng.choice(instances).prepare([ref])).kubelet_error == ""

    settings = DriverSettings(
        driver_name=DRIVER,
        node_name=two.paths.node_name,
        plugin_dir=two.paths.plugin_dir,
        registry_dir=two.paths.registry_dir,
        cdi_dir=two.paths.cdi_dir,
    )
    snapshot = await audit.take_snapshot(settings, backend=gpus, claims=ApiClaims(two.api))
    assert audit.find_inconsistencies(snapshot) == []
    assert snapshot.checkpoint is not None
    assert sorted(snapshot.checkpoint.claims) == sorted(r.uid for r in refs[:2])
    assert sorted(snapshot.in_use.items() if snapshot.in_use else []) == [
        ("gpu-0", frozenset({refs[0].uid})),
        ("gpu-1", frozenset({refs[1].uid})),
    ]
    assert all(p.alive for p in two.processes)
