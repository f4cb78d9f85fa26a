"""The ResourceSlice publisher against the stand-in (Kubernetes 1.32 and 1.34) and the real
kube-apiserver 1.37, publishing as the driver's ServiceAccount."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pytest

from dralet import kube
from dralet.apiserver import ApiServer, schema_errors
from dralet.kube import resources, slices
from dralet.kube.events import NodeEvents
from dralet.metrics import DriverMetrics
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    Device,
    DeviceHealth,
    PreparedDevice,
    Version,
)
from dralet.node.published import build_pool
from dralet.node.publisher import PublisherSettings, SlicePublisher
from tests.kubeobjects import node

DRIVER = "gpu.example.com"
NODE = "node-a"
DEADLINE = 10.0


class FakeBackend:
    """A ClaimBackend whose device list the test sets."""

    def __init__(self, count: int, *, model: str = "A100") -> None:
        self.set(count, model=model)

    def set(self, count: int, *, model: str = "A100") -> None:
        self.listed: list[Device] = [
            Device(
                name=f"gpu-{i}",
                attributes={
                    "model": model,
                    "index": i,
                    "healthy": True,
                    "driverVersion": Version("1.2.3"),
                },
                capacity={"memory": "80Gi"},
            )
            for i in range(count)
        ]

    async def devices(self) -> Sequence[Device]:
        return list(self.listed)

    async def prepare_claim(self, allocation: ClaimAllocation) -> Sequence[PreparedDevice]:
        raise NotImplementedError

    async def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        raise NotImplementedError

    async def devices_in_use(self) -> Mapping[str, str]:
        return {}

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return False

    async def health(self) -> Mapping[str, DeviceHealth]:
        return {}


class RecordedEvents:
    """Stands in for ``NodeEvents``: keeps the Warning Events the publisher records."""

    def __init__(self) -> None:
        self.warnings: list[tuple[str, str]] = []

    async def warn(self, reason: str, message: str) -> None:
        self.warnings.append((reason, message))


def publisher(
    client: kube.KubeClient,
    backend: FakeBackend,
    metrics: DriverMetrics | None = None,
    events: RecordedEvents | None = None,
    **settings: Any,
) -> SlicePublisher:
    return SlicePublisher(
        client,
        backend,
        driver=DRIVER,
        node_name=NODE,
        metrics=metrics,
        events=cast("NodeEvents", events),
        settings=PublisherSettings(backoff=(0.05,), **settings),
    )


def live(apiserver: ApiServer) -> list[dict[str, Any]]:
    return apiserver.list(
        "ResourceSlice", field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}"
    )


def versions(apiserver: ApiServer) -> list[tuple[str, str]]:
    """Each live slice's name and resourceVersion: unchanged means not written."""
    return [(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in live(apiserver)]


def devices_of(slice_: Mapping[str, Any]) -> list[str]:
    return [d["name"] for d in slice_["spec"]["devices"]]


def pools(apiserver: ApiServer) -> set[tuple[int, int]]:
    return {
        (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
        for s in live(apiserver)
    }


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds or the deadline passes (no fixed sleeps)."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE}s: {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def node_uid(apiserver: ApiServer) -> str:
    return str(apiserver.create(node(NODE))["metadata"]["uid"])


async def test_publishes_the_pool_in_the_served_shape(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    pub = publisher(client, FakeBackend(4))
    assert not pub.published.is_set()
    plan = await pub.reconcile_once()
    assert pub.published.is_set()  # what the driver's readiness waits for
    assert [w.verb for w in plan.writes] == ["create"]
    [published] = live(apiserver)
    meta, spec = published["metadata"], published["spec"]
    assert meta["name"].startswith(f"{NODE}-{DRIVER}-")
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}
    first = spec["devices"][0]
    attributes = (
        first["basic"]["attributes"]
        if apiserver.preferred_version == "v1beta1"
        else first["attributes"]
    )
    assert attributes["model"] == {"string": "A100"}
    assert attributes["index"] == {"int": 0}
    assert attributes["healthy"] == {"bool": True}
    assert attributes["driverVersion"] == {"version": "1.2.3"}


async def test_no_writes_when_nothing_changed(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    pub = publisher(client, FakeBackend(200))
    await pub.reconcile_once()
    before = versions(apiserver)
    for _ in range(3):
        plan = await pub.reconcile_once()
        assert plan.writes == ()
    assert versions(apiserver) == before


async def test_more_than_128_devices_make_a_multi_slice_pool(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    await publisher(client, FakeBackend(300)).reconcile_once()
    published = live(apiserver)
    assert sorted(len(devices_of(s)) for s in published) == [44, 128, 128]
    assert pools(apiserver) == {(0, 3)}
    names = [n for s in published for n in devices_of(s)]
    assert sorted(names) == sorted(f"gpu-{i}" for i in range(300))


async def test_device_change_bumps_the_generation(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    backend = FakeBackend(300)
    pub = publisher(client, backend)
    await pub.reconcile_once()
    names = {s["metadata"]["name"] for s in live(apiserver)}
    backend.set(300, model="H100")
    plan = await pub.reconcile_once()
    assert plan.generation == 1 and {w.verb for w in plan.writes} == {"update"}
    assert pools(apiserver) == {(1, 3)}
    assert {s["metadata"]["name"] for s in live(apiserver)} == names, "slices are updated in place"
    backend.set(5)
    plan = await pub.reconcile_once()
    assert sorted(w.verb for w in plan.writes) == ["delete", "delete", "update"]
    assert pools(apiserver) == {(2, 1)}
    assert devices_of(live(apiserver)[0]) == [f"gpu-{i}" for i in range(5)]


async def test_a_missing_slice_is_recreated_at_the_same_generation(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    pub = publisher(client, FakeBackend(300))
    await pub.reconcile_once()
    victim = live(apiserver)[1]
    apiserver.delete("ResourceSlice", victim["metadata"]["name"])
    plan = await pub.reconcile_once()
    assert [w.verb for w in plan.writes] == ["create"]
    assert pools(apiserver) == {(0, 3)}
    assert sorted(n for s in live(apiserver) for n in devices_of(s)) == sorted(
        f"gpu-{i}" for i in range(300)
    )


async def test_other_pools_of_this_node_are_removed(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    v = apiserver.preferred_version
    old = await client.create(
        resources.resource_slices(v),
        {
            "apiVersion": f"resource.k8s.io/{v}",
            "kind": "ResourceSlice",
            "metadata": {"name": "old-pool"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "devices": [],
                "pool": {"name": "old-pool", "generation": 7, "resourceSliceCount": 1},
            },
        },
    )
    await publisher(client, FakeBackend(2)).reconcile_once()
    assert old["metadata"]["name"] not in {s["metadata"]["name"] for s in live(apiserver)}
    assert pools(apiserver) == {(0, 1)}


async def test_without_a_node_object_slices_have_no_owner(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    await publisher(client, FakeBackend(1)).reconcile_once()
    [published] = live(apiserver)
    assert "ownerReferences" not in published["metadata"]


async def test_a_device_listed_twice_is_left_out_and_the_rest_published(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    backend = FakeBackend(2)
    backend.listed.append(backend.listed[0])
    events = RecordedEvents()
    pub = publisher(client, backend, events=events)
    await pub.reconcile_once()
    [published] = live(apiserver)
    assert devices_of(published) == ["gpu-0", "gpu-1"]
    assert events.warnings == [("DeviceNotPublished", "device 'gpu-0' is listed twice")]
    await pub.reconcile_once()
    assert len(events.warnings) == 1, "the same problem is reported once, not every pass"


async def test_bad_driver_or_pool_name_publishes_nothing(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    pub = SlicePublisher(client, FakeBackend(2), driver=DRIVER, node_name=NODE, pool="Bad_Pool")
    with pytest.raises(slices.InvalidDeviceError, match="pool name"):
        await pub.reconcile_once()
    assert live(apiserver) == []


def test_build_pool_cuts_at_128_and_checks_names() -> None:
    devices = [Device(name=f"d-{i}") for i in range(257)]
    built = build_pool(devices, driver=DRIVER, pool="pool-a", node_name=NODE)
    assert [len(c) for c in built.chunks] == [128, 128, 1]
    assert built.skipped == ()
    assert build_pool([], driver=DRIVER, pool="pool-a", node_name=NODE).chunks == ((),)
    twice = build_pool(
        [Device(name="d"), Device(name="d")], driver=DRIVER, pool="p", node_name=NODE
    )
    assert [len(c) for c in twice.chunks] == [1]
    assert len(twice.skipped) == 1 and "listed twice" in twice.skipped[0]
    with pytest.raises(slices.InvalidDeviceError, match="pool name"):
        build_pool(devices, driver=DRIVER, pool="Bad_Pool", node_name=NODE)


async def test_conflicting_write_is_retried_after_a_re_read(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str, metrics: DriverMetrics
) -> None:
    backend = FakeBackend(3)
    pub = publisher(client, backend, metrics)
    await pub.reconcile_once()
    backend.set(3, model="H100")
    real_patch = client.merge_patch
    interfered = False

    async def patch_after_someone_else(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal interfered
        if not interfered:
            interfered = True
            name = live(apiserver)[0]["metadata"]["name"]
            apiserver.patch("ResourceSlice", name, {"metadata": {"labels": {"touched": "yes"}}})
        return await real_patch(*args, **kwargs)

    client.merge_patch = patch_after_someone_else  # type: ignore[method-assign]
    await pub.reconcile_once()
    assert metrics.api_retries.labels(reason="conflict")._value.get() == 1
    [published] = live(apiserver)
    assert published["metadata"]["labels"] == {"touched": "yes"}
    assert published["spec"]["pool"]["generation"] == 1


@pytest.mark.stand_in_only("injects 503 answers")
async def test_overloaded_server_is_retried_after_retry_after(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str, metrics: DriverMetrics
) -> None:
    apiserver.inject_failure(503, times=2, method="POST", retry_after=0)
    await publisher(client, FakeBackend(1), metrics).reconcile_once()
    assert len(live(apiserver)) == 1
    assert metrics.api_retries.labels(reason="503")._value.get() == 2


@pytest.mark.stand_in_only("compacts the watch history on demand")
async def test_run_recreates_slices_the_kubelet_deleted(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str, metrics: DriverMetrics
) -> None:
    backend = FakeBackend(130)
    pub = publisher(client, backend, metrics, resync_period=60.0)
    task = pub.start()
    try:
        assert task.get_name() == "dralet-publisher"
        await eventually(
            lambda: len(live(apiserver)) == 2 and pools(apiserver) == {(0, 2)},
            "pool published",
        )
        # The kubelet wipes all of its node's slices when it starts.
        await client.delete_collection(
            resources.resource_slices(apiserver.preferred_version),
            field_selector=f"spec.nodeName={NODE}",
        )
        await eventually(lambda: len(live(apiserver)) == 2, "slices re-created")
        assert pools(apiserver) == {(0, 2)}
        # A compaction forces a relist; a deletion after it is still noticed.
        apiserver.compact()
        apiserver.delete("ResourceSlice", live(apiserver)[0]["metadata"]["name"])
        await eventually(lambda: len(live(apiserver)) == 2, "slice re-created after relist")
        backend.set(130, model="H100")
        pub.trigger()
        await eventually(
            lambda: len(live(apiserver)) == 2 and pools(apiserver) == {(1, 2)},
            "new generation on trigger",
        )
        reconciles = pub.reconciles
        creates = metrics.slice_publishes.labels(verb="create")._value.get()
        assert creates == 5
    finally:
        await pub.stop()
    assert task.cancelled()
    assert pub.reconciles >= reconciles


@pytest.mark.stand_in_only("reads the log of accepted writes")
async def test_every_write_passes_the_strict_schema_of_its_version(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str
) -> None:
    backend = FakeBackend(140)
    pub = publisher(client, backend)
    await pub.reconcile_once()
    backend.set(10, model="H100")
    await pub.reconcile_once()
    writes = apiserver.writes_of("ResourceSlice")
    assert {w.verb for w in writes} >= {"create", "patch", "delete"}
    for write in writes:
        assert write.api_version == f"resource.k8s.io/{apiserver.preferred_version}"
        assert (
            schema_errors(write.object, kubernetes_version=apiserver.settings.kubernetes_version)
            == []
        )
