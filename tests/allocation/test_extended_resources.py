"""Extended resources backed by DRA: the scheduler's claim for a pod's
``deviceclass.resource.kubernetes.io/<class>`` and ``extendedResourceName`` requests."""

from __future__ import annotations

from typing import Any

from tests.allocation.test_allocation_cases import dclass, dev, rslice

from dralet.allocation import allocator, manifests, simulation

Object = dict[str, Any]
GPU = "deviceclass.resource.kubernetes.io/gpu"


def _pod(name: str, *containers: Object, init: tuple[Object, ...] = ()) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"initContainers": list(init), "containers": list(containers)},
    }


def _gpus(container: str, count: int, **more: Any) -> Object:
    return {
        "name": container,
        "image": "registry.example.com/app:1",
        "resources": {"requests": {GPU: str(count), "cpu": "1", **more}},
    }


def _run(objects: list[Object]) -> simulation.SimulationReport:
    return simulation.simulate(
        manifests.decode_objects(objects),
        settings=simulation.SimulationSettings(allocator=allocator.AllocatorSettings()),
    )


THREE_GPUS = [dclass(), rslice("s", [dev("gpu-0"), dev("gpu-1"), dev("gpu-2")])]


def test_a_container_gets_devices_of_the_class_its_resource_names() -> None:
    report = _run([*THREE_GPUS, _pod("p", _gpus("main", 2)), _pod("q", _gpus("main", 2))])
    first, second = report.pods
    assert (first.status, first.claims) == ("scheduled", ("default/p-extended-resources",))
    (claim,) = report.outcomes[:1]
    assert claim.allocation is not None
    # cpu sorts before the class's name: the resource is the container's request #1.
    assert [(r.request, r.device) for r in claim.allocation.results] == [
        ("container-0-request-1", "gpu-0"),
        ("container-0-request-1", "gpu-1"),
    ]
    assert second.status == "unschedulable"


def test_a_class_may_name_its_extended_resource() -> None:
    named = dclass("gpu")
    named["spec"]["extendedResourceName"] = "example.com/gpu"
    pod = _pod("p", {"name": "main", "resources": {"requests": {"example.com/gpu": 1}}})
    report = _run([named, rslice("s", [dev("gpu-0")]), pod])
    (outcome,) = report.pods
    assert outcome.status == "scheduled"


def test_of_classes_naming_the_same_resource_the_newest_backs_it() -> None:
    old, new = dclass("old", 'device.attributes["gpu.example.com"].model == "x"'), dclass("new")
    for cls, created in ((old, "2026-01-01T00:00:00Z"), (new, "2026-02-01T00:00:00Z")):
        cls["spec"]["extendedResourceName"] = "example.com/gpu"
        cls["metadata"]["creationTimestamp"] = created
    pod = _pod("p", {"name": "main", "resources": {"requests": {"example.com/gpu": 1}}})
    report = _run([old, new, rslice("s", [dev("gpu-0", model="y")]), pod])
    assert report.pods[0].status == "scheduled"


def test_the_implicit_name_of_a_class_that_does_not_exist_cannot_fit() -> None:
    pod = _pod("p", _gpus("main", 1))
    report = _run([rslice("s", [dev("gpu-0")]), dclass("other"), pod])
    (outcome,) = report.pods
    assert (outcome.status, outcome.error) == ("unschedulable", f"cannot fit resource {GPU}")


def test_init_containers_reuse_what_later_containers_hold() -> None:
    # init-a needs 3 but the container after it holds 1: 2 more; init-b needs 1: none more.
    pod = _pod("p", _gpus("main", 1), init=(_gpus("init-a", 3), _gpus("init-b", 1)))
    report = _run([*THREE_GPUS, pod])
    (claim,) = report.outcomes
    assert claim.allocation is not None
    requests = [r.request for r in claim.allocation.results]
    assert requests == ["container-0-request-1", "container-0-request-1", "container-2-request-1"]


def test_a_pod_with_only_device_plugin_resources_is_ignored() -> None:
    pod = _pod("p", {"name": "main", "resources": {"requests": {"vendor.example.com/fpga": 1}}})
    report = _run([*THREE_GPUS, pod])
    assert report.pods == ()
    assert "Pod default/p" in report.ignored
