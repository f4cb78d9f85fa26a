"""The example driver's partitioned and shared GPUs: what it publishes (whole GPUs and
partitions over a counter set per GPU, shared GPUs with a request policy), and what its
"hardware" does at prepare and release (a partition is created and destroyed, the
whole GPU and a partition of it never go to two claims, each share gets its shareID and
consumed memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dralet.cdi.store import SpecStore
from dralet.drivers.example.gpus import SimulatedGPUs
from dralet.drivers.example.inventory import Layout
from dralet.node.devices import counter_set_to_json, device_to_json
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node

DRIVER = "gpu.example.com"


def gpus(tmp: Path) -> SimulatedGPUs:
    return SimulatedGPUs(
        state_dir=tmp / "state", node_name="node-a", count=3, partitions=2, shared=1
    )


async def test_partitions_share_the_gpus_counter_set_and_the_last_gpu_is_shared(
    tmp_path: Path,
) -> None:
    backend = gpus(tmp_path)
    published = [device_to_json(d) for d in await backend.devices()]
    assert [d["name"] for d in published] == [
        "gpu-0",
        "gpu-0-part-0",
        "gpu-0-part-1",
        "gpu-1",
        "gpu-1-part-0",
        "gpu-1-part-1",
        "gpu-2",
    ]
    by_name = {d["name"]: d for d in published}
    assert by_name["gpu-0"]["consumesCounters"] == [
        {"counterSet": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}
    ]
    assert by_name["gpu-1-part-1"]["capacity"] == {"memory": {"value": "40Gi"}}
    assert by_name["gpu-1-part-1"]["consumesCounters"] == [
        {"counterSet": "gpu-1", "counters": {"memory": {"value": "40Gi"}}}
    ]
    assert by_name["gpu-1-part-1"]["attributes"]["partition"] == {"int": 1}
    assert by_name["gpu-1-part-1"]["attributes"]["uuid"] != by_name["gpu-1"]["attributes"]["uuid"]
    shared = by_name["gpu-2"]
    assert shared["allowMultipleAllocations"] is True
    assert "consumesCounters" not in shared
    assert shared["capacity"]["memory"]["requestPolicy"]["default"] == "10Gi"
    assert [counter_set_to_json(c) for c in await backend.counter_sets()] == [
        {"name": f"gpu-{i}", "counters": {"memory": {"value": "80Gi"}}} for i in (0, 1)
    ]
    assert set(await backend.health()) == set(by_name)


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        ({"partitions": 3}, "does not split into 3"),
        ({"shared": 4}, "shared: 4 GPUs, but there are 3"),
    ],
)
def test_a_layout_that_cannot_be_is_refused(layout: dict[str, int], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Layout(3, "80Gi", **layout)


def _share(claim: dict[str, Any], share_id: str, memory: str) -> dict[str, Any]:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    result["shareID"] = share_id
    result["consumedCapacity"] = {"memory": memory}
    return claim


async def test_a_partition_is_made_at_prepare_and_its_gpu_is_not_handed_out_whole(
    short_tmp: Path,
) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    backend = gpus(short_tmp)
    claims = MemoryClaims()
    half = claims.add(allocated_claim("half", driver=DRIVER, devices=[("gpu", "gpu-0-part-1")]))
    whole = claims.add(allocated_claim("whole", driver=DRIVER, devices=[("gpu", "gpu-0")]))
    async with running_node(settings, backend, claims=claims) as node:
        prepared = await node.prepare(half)
        assert prepared.kubelet_error == ""
        uid = half["metadata"]["uid"]
        assert backend.in_use() == {"gpu-0-part-1": uid}

        refused = await node.prepare(whole)
        error = refused.claims[whole["metadata"]["uid"]].error
        assert f"gpu-0-part-1 is in use by claim {uid} in the hardware" in error

        assert (await node.unprepare(half)).kubelet_error == ""
        assert backend.in_use() == {}
        assert (await node.prepare(whole)).kubelet_error == ""


async def test_a_gpu_held_whole_keeps_its_partitions_and_leaves_other_gpus_free(
    short_tmp: Path,
) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    backend = gpus(short_tmp)
    claims = MemoryClaims()
    whole = claims.add(allocated_claim("whole", driver=DRIVER, devices=[("gpu", "gpu-0")]))
    half = claims.add(allocated_claim("half", driver=DRIVER, devices=[("gpu", "gpu-0-part-0")]))
    other = claims.add(allocated_claim("other", driver=DRIVER, devices=[("gpu", "gpu-1-part-0")]))
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(whole)).kubelet_error == ""
        uid = whole["metadata"]["uid"]

        refused = await node.prepare(half)
        error = refused.claims[half["metadata"]["uid"]].error
        assert f"gpu-0 is in use by claim {uid} in the hardware" in error

        assert (await node.prepare(other)).kubelet_error == ""
        assert backend.in_use() == {"gpu-0": uid, "gpu-1-part-0": other["metadata"]["uid"]}


async def test_each_share_gets_its_share_id_and_memory(short_tmp: Path) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    backend = gpus(short_tmp)
    claims = MemoryClaims()
    first = claims.add(
        _share(allocated_claim("a", driver=DRIVER, devices=[("gpu", "gpu-2")]), "s-1", "10Gi")
    )
    second = claims.add(
        _share(allocated_claim("b", driver=DRIVER, devices=[("gpu", "gpu-2")]), "s-2", "30Gi")
    )
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(first, second)).kubelet_error == ""
        a, b = first["metadata"]["uid"], second["metadata"]["uid"]
        assert backend.shares() == {"gpu-2": {a: {"s-1": "10Gi"}, b: {"s-2": "30Gi"}}}
        assert await backend.devices_in_use() == {"gpu-2": sorted([a, b])}
        specs = SpecStore(settings.cdi_dir, settings.cdi_kind)
        for uid, share, memory in ((a, "s-1", "10Gi"), (b, "s-2", "30Gi")):
            (device,) = (specs.read(uid) or {})["devices"]
            env = device["containerEdits"]["env"]
            assert f"EXAMPLE_GPU_2_SHARE={share}" in env
            assert f"EXAMPLE_GPU_2_MEMORY={memory}" in env
        assert (await node.unprepare(first)).kubelet_error == ""
        assert backend.shares() == {"gpu-2": {b: {"s-2": "30Gi"}}}
