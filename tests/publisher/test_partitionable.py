"""Publishing what 1.36+ clusters use: taints, shared counters, consumable capacity,
binding conditions and health taints, and only where the cluster serves them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from dralet import kube
from dralet.allocation import allocator, manifests, simulation
from dralet.allocation.features import Features
from dralet.apiserver import ApiServer
from dralet.node import devices
from dralet.node.backend import DeviceHealth, HealthStatus
from dralet.node.devices import (
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    QuantityRange,
    RequestPolicy,
)
from dralet.node.published import build_pool, device_to_json
from dralet.node.publisher import PublisherSettings, SlicePublisher
from tests.publisher.test_publisher import DRIVER, NODE, FakeBackend, live, node_uid

__all__ = ["node_uid"]  # the shared fixture, used by the tests below

ALL = frozenset({"DRADeviceTaints", "DRAPartitionableDevices", "DRAConsumableCapacity"})


class PartitionedGPU(FakeBackend):
    """One GPU's memory shared by MIG-like partitions: a counter set and devices using it."""

    def __init__(self) -> None:
        super().__init__(0)
        self.listed = [
            Device(
                name=f"gpu-0-mig-{i}",
                attributes={"profile": "1g.10gb"},
                consumes_counters=(CounterConsumption("gpu-0", {"memory": "10Gi"}),),
            )
            for i in range(7)
        ]
        self.health_now: dict[str, DeviceHealth] = {}

    async def counter_sets(self) -> Sequence[CounterSet]:
        return [CounterSet("gpu-0", {"memory": "80Gi", "slices": "7"})]

    async def health(self) -> Mapping[str, DeviceHealth]:
        return dict(self.health_now)


def _serves_new_fields(apiserver: Any) -> bool:
    """The stand-ins play 1.32 and 1.34 (alpha gates off); the real server is 1.37."""
    return not isinstance(apiserver, ApiServer)


def _publisher(client: kube.KubeClient, backend: FakeBackend, **settings: Any) -> SlicePublisher:
    return SlicePublisher(
        client,
        backend,
        driver=DRIVER,
        node_name=NODE,
        settings=PublisherSettings(backoff=(0.05,), **settings),
    )


def test_every_new_field_is_written_in_the_v1_shape() -> None:
    device = Device(
        name="share-0",
        capacity={
            "bandwidth": Capacity(
                "100G",
                RequestPolicy("10G", valid_range=QuantityRange(min="10G", max="100G", step="10G")),
            ),
            "memory": Capacity("80Gi", RequestPolicy("8Gi", valid_values=("8Gi", "16Gi"))),
        },
        taints=(DeviceTaint("gpu.example.com/maintenance", "NoExecute", "planned"),),
        allow_multiple_allocations=True,
        binds_to_node=True,
        binding_conditions=("Attached",),
        binding_failure_conditions=("AttachFailed",),
    )
    assert device_to_json(device) == {
        "name": "share-0",
        "capacity": {
            "bandwidth": {
                "value": "100G",
                "requestPolicy": {
                    "default": "10G",
                    "validRange": {"min": "10G", "max": "100G", "step": "10G"},
                },
            },
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "8Gi", "validValues": ["8Gi", "16Gi"]},
            },
        },
        "taints": [
            {"key": "gpu.example.com/maintenance", "effect": "NoExecute", "value": "planned"}
        ],
        "allowMultipleAllocations": True,
        "bindsToNode": True,
        "bindingConditions": ["Attached"],
        "bindingFailureConditions": ["AttachFailed"],
    }


def test_slices_with_taints_hold_at_most_64_devices_and_counters_get_their_own() -> None:
    tainted = [
        Device(name=f"d-{i}", taints=(DeviceTaint("example.com/t", "NoSchedule"),))
        for i in range(100)
    ]
    sets = [CounterSet(f"set-{i}", {"memory": "1Gi"}) for i in range(10)]
    built = build_pool(
        tainted, driver=DRIVER, pool="p", node_name=NODE, counter_sets=sets, served=ALL
    )
    assert [len(c) for c in built.chunks] == [64, 36]
    assert [len(c) for c in built.counter_chunks] == [8, 2]
    plain = build_pool(
        [Device(name=f"d-{i}") for i in range(100)], driver=DRIVER, pool="p", node_name=NODE
    )
    assert [len(c) for c in plain.chunks] == [100]


def test_fields_the_cluster_does_not_serve_are_left_out_and_named() -> None:
    backend_devices = [
        Device(
            name="d-0",
            taints=(DeviceTaint("example.com/t", "NoSchedule"),),
            consumes_counters=(CounterConsumption("set-0", {"memory": "1Gi"}),),
        )
    ]
    built = build_pool(
        backend_devices,
        driver=DRIVER,
        pool="p",
        node_name=NODE,
        counter_sets=[CounterSet("set-0", {"memory": "1Gi"})],
        served=frozenset(),
    )
    assert built.chunks == (({"name": "d-0"},),)
    assert built.counter_chunks == ()
    assert built.unserved == {"DRADeviceTaints", "DRAPartitionableDevices"}


def test_partitions_are_published_only_where_the_cluster_counts_counters() -> None:
    whole = Device(name="gpu-0", consumes_counters=(CounterConsumption("set-0", {"m": "2"}),))
    half = Device(
        name="gpu-0-half-0",
        consumes_counters=(CounterConsumption("set-0", {"m": "1"}),),
        partition=True,
    )
    counters = [CounterSet("set-0", {"m": "2"})]

    def names(served: frozenset[str] | None) -> list[str]:
        built = build_pool(
            [whole, half],
            driver=DRIVER,
            pool="p",
            node_name=NODE,
            counter_sets=counters,
            served=served,
        )
        return [d["name"] for chunk in built.chunks for d in chunk]

    assert names(frozenset({"DRAPartitionableDevices"})) == ["gpu-0", "gpu-0-half-0"]
    # Without counters the scheduler could give both to two claims: the half is left out.
    assert names(frozenset()) == ["gpu-0"]


def test_a_health_taint_past_the_limit_leaves_that_device_out() -> None:
    taints = tuple(DeviceTaint(f"example.com/t{i}", "NoSchedule") for i in range(16))
    built = build_pool(
        [Device(name="full", taints=taints), Device(name="fine")],
        driver=DRIVER,
        pool="p",
        node_name=NODE,
        served=ALL,
        extra_taints={
            name: DeviceTaint(f"{DRIVER}/unhealthy", "NoSchedule") for name in ("full", "fine")
        },
    )
    assert [d["name"] for d in built.chunks[0]] == ["fine"]
    assert "17 taints; at most 16" in built.skipped[0]


async def test_partitionable_devices_round_trip_only_where_served(
    apiserver: Any, client: kube.KubeClient, node_uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dralet.node.publisher")
    pub = _publisher(client, PartitionedGPU())
    first = await pub.reconcile_once()
    slices = live(apiserver)
    served = _serves_new_fields(apiserver)
    if served:
        [counters] = [s for s in slices if s["spec"].get("sharedCounters")]
        [with_devices] = [s for s in slices if s["spec"].get("devices")]
        assert counters["spec"]["sharedCounters"][0]["name"] == "gpu-0"
        assert "devices" not in counters["spec"]
        device = with_devices["spec"]["devices"][0]
        assert device["consumesCounters"][0]["counterSet"] == "gpu-0"
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
        assert "does not serve" not in caplog.text
    else:
        [only] = slices
        assert "sharedCounters" not in only["spec"]
        assert all("consumesCounters" not in d for d in only["spec"]["devices"])
        assert caplog.text.count("shared counters (partitionable devices)") == 1
    assert first.writes
    again = await pub.reconcile_once()
    assert again.writes == (), "what the cluster does not serve must not cause rewrites"
    await pub.reconcile_once()
    assert caplog.text.count("does not serve") == (0 if served else 1), "said once"


async def test_an_unhealthy_device_is_tainted_until_it_recovers(
    apiserver: Any, client: kube.KubeClient, node_uid: str
) -> None:
    backend = PartitionedGPU()
    pub = _publisher(client, backend, unhealthy_taint_effect="NoExecute")
    backend.health_now = {"gpu-0-mig-3": DeviceHealth(HealthStatus.UNHEALTHY, "XID 79")}
    await pub.reconcile_once()

    def taints() -> dict[str, Any]:
        # The real server stamps each taint's timeAdded (kubernetes/api DeviceTaint).
        return {
            d["name"]: [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]
            for s in live(apiserver)
            for d in s["spec"].get("devices") or []
            if d.get("taints")
        }

    if not _serves_new_fields(apiserver):
        assert taints() == {}
        return
    assert taints() == {
        "gpu-0-mig-3": [{"key": f"{DRIVER}/unhealthy", "effect": "NoExecute"}],
    }
    backend.health_now = {}
    await pub.reconcile_once()
    assert taints() == {}


def test_taint_effects_are_the_api_servers() -> None:
    assert set(devices.TaintEffect.__args__) == {"NoSchedule", "NoExecute", "None"}  # type: ignore[attr-defined]


def test_a_taint_time_the_server_added_is_not_a_difference() -> None:
    import copy

    from dralet.kube import slices

    owner = slices.NodeOwner(NODE, "uid-1")
    device = {"name": "d-0", "taints": [{"key": "example.com/t", "effect": "NoSchedule"}]}
    spec = copy.deepcopy(
        slices.slice_spec([device], driver=DRIVER, pool="p", node=owner, generation=1, count=1)
    )
    spec["devices"][0]["taints"][0]["timeAdded"] = "2026-12-03T07:00:00Z"
    live_slice = {"metadata": {"name": "s-1", "resourceVersion": "7"}, "spec": spec}
    plan = slices.plan_pool(
        [[device]], [live_slice], driver=DRIVER, pool="p", node=owner, last_generation=1
    )
    assert plan.writes == ()


class SlicedGPU(PartitionedGPU):
    """One 80Gi GPU published whole and as four 20Gi partitions over one counter set."""

    def __init__(self) -> None:
        super().__init__()
        use = {"whole": "80Gi", **{f"mig-{i}": "20Gi" for i in range(4)}}
        self.listed = [
            Device(
                name=name,
                attributes={"profile": "whole" if name == "whole" else "2g.20gb"},
                consumes_counters=(CounterConsumption("gpu-0", {"memory": memory}),),
            )
            for name, memory in use.items()
        ]

    async def counter_sets(self) -> Sequence[CounterSet]:
        return [CounterSet("gpu-0", {"memory": "80Gi"})]


def _claim(name: str, profile: str, *, tolerate: bool = False) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": "gpu",
        "selectors": [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "{profile}"'}}
        ],
    }
    if tolerate:
        exactly["tolerations"] = [{"key": f"{DRIVER}/unhealthy", "operator": "Exists"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
    }


async def test_what_was_published_simulates_within_its_counters_and_taints(
    apiserver: Any, client: kube.KubeClient, node_uid: str
) -> None:
    """The round trip on 1.37: the publisher's counter sets and health taint, as the API
    server stored them, are what ``dralet simulate`` allocates from."""
    if not _serves_new_fields(apiserver):
        pytest.skip("the stand-ins play 1.32 and 1.34, which do not serve these fields")
    backend = SlicedGPU()
    backend.health_now = {"mig-3": DeviceHealth(HealthStatus.UNHEALTHY, "XID 79")}
    await _publisher(client, backend, unhealthy_taint_effect="NoSchedule").reconcile_once()
    gpu_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
    claims = [
        *(_claim(f"part-{i}", "2g.20gb") for i in range(4)),
        _claim("part-tolerating", "2g.20gb", tolerate=True),
        _claim("whole", "whole"),
    ]
    inputs = manifests.decode_objects([gpu_class, *live(apiserver), *claims])
    settings = allocator.AllocatorSettings(features=Features.for_release("1.37"))
    report = simulation.simulate(inputs, settings=simulation.SimulationSettings(allocator=settings))
    got = {
        o.claim.name: [r.device for r in o.allocation.results] if o.allocation else o.status
        for o in report.outcomes
    }
    assert got == {
        "part-0": ["mig-0"],
        "part-1": ["mig-1"],
        "part-2": ["mig-2"],
        "part-3": "unschedulable",  # only mig-3 is left, tainted and not tolerated
        "part-tolerating": ["mig-3"],
        "whole": "unschedulable",  # the partitions hold all 80Gi of the counter set
    }


async def test_a_pool_that_becomes_partitionable_is_published_again(
    apiserver: Any, client: kube.KubeClient, node_uid: str
) -> None:
    """A node whose devices were published plain, then as partitions over a counter set
    (a driver upgrade, a reconfigured GPU): the slice that held the devices is rewritten
    to hold only what it holds now, in one write the server accepts."""
    if not _serves_new_fields(apiserver):
        pytest.skip("the stand-ins play 1.32 and 1.34, which do not serve these fields")
    plain = FakeBackend(2)
    await _publisher(client, plain).reconcile_once()
    assert {d["name"] for s in live(apiserver) for d in s["spec"].get("devices") or []} == {
        "gpu-0",
        "gpu-1",
    }
    await _publisher(client, SlicedGPU()).reconcile_once()
    slices = live(apiserver)
    assert sorted(bool(s["spec"].get("sharedCounters")) for s in slices) == [False, True]
    for s in slices:
        assert not (s["spec"].get("sharedCounters") and s["spec"].get("devices"))
    assert {d["name"] for s in slices for d in s["spec"].get("devices") or []} == {
        "whole",
        *(f"mig-{i}" for i in range(4)),
    }
