"""The scheduler's verdict on a pod across nodes, each class reproduced on a minimal
cluster against kube-scheduler 1.37.2 (issue 46): an allocator error on any node aborts
the pod, ExactCount skips incomplete and invalid pools (1.35+), an invalid pool fails
only its node, and a missing DeviceClass makes the pod Unschedulable.
"""

from __future__ import annotations

from typing import Any

from tests.allocation.test_allocation_cases import (
    NUMA,
    claim,
    dclass,
    dev,
    match,
    req,
    rslice,
)
from tests.allocation.test_upstream_allocator_cases import pod

from dralet.allocation import allocator, manifests, simulation

Object = dict[str, Any]
SINCE_135 = allocator.AllocatorSettings(skip_unusable_pools=True)
"""What ``simulate -k 1.35`` and later set."""


def _run(
    objects: list[Object], settings: allocator.AllocatorSettings = SINCE_135
) -> simulation.SimulationReport:
    return simulation.simulate(
        manifests.decode_objects(objects),
        settings=simulation.SimulationSettings(allocator=settings),
    )


def _pod(report: simulation.SimulationReport) -> tuple[str, str | None, str | None]:
    (outcome,) = report.pods
    return outcome.status, outcome.node, outcome.error


def test_an_allocator_error_on_a_later_node_aborts_the_pod() -> None:
    # node-a fits; on node-b the All request cannot keep matchAttribute: the scheduler's
    # Filter returns an error there and the pod is not scheduled anywhere.
    report = _run(
        [
            dclass(),
            rslice("a", [dev("gpu-0", numa=0)], node="node-a", pool="pool-a"),
            rslice("b", [dev("gpu-0", numa=0), dev("gpu-1", numa=1)], node="node-b", pool="pool-b"),
            claim("c", req(mode="All"), constraints=[match(NUMA)]),
            pod("p", "c"),
        ]
    )
    status, node, error = _pod(report)
    assert (status, node) == ("error", "node-b")
    assert error is not None and "claim constraint would not be satisfied" in error
    assert report.outcomes == ()


def test_the_first_fit_is_kept_when_no_node_errs() -> None:
    report = _run(
        [
            dclass(),
            rslice("a", [dev("gpu-0")], node="node-a", pool="pool-a"),
            rslice("b", [dev("gpu-0")], node="node-b", pool="pool-b"),
            claim("c", req()),
            pod("p", "c"),
        ]
    )
    assert _pod(report)[:2] == ("scheduled", "node-a")


def test_stopping_at_the_first_fit_is_a_setting() -> None:
    objects = [
        dclass(),
        rslice("a", [dev("gpu-0", numa=0)], node="node-a", pool="pool-a"),
        rslice("b", [dev("gpu-0", numa=0), dev("gpu-1", numa=1)], node="node-b", pool="pool-b"),
        claim("c", req(mode="All"), constraints=[match(NUMA)]),
        pod("p", "c"),
    ]
    report = simulation.simulate(
        manifests.decode_objects(objects),
        settings=simulation.SimulationSettings(allocator=SINCE_135, filter_every_node=False),
    )
    assert _pod(report)[:2] == ("scheduled", "node-a")


def test_an_incomplete_pool_is_skipped_by_exact_count() -> None:
    objects = [dclass(), rslice("s", [dev("gpu-0")], count=2), claim("c", req()), pod("p", "c")]
    status, _, error = _pod(_run(objects))
    assert status == "unschedulable"
    assert error is not None and "1 cannot allocate all claims" in error
    # Before 1.35 the scheduler took devices from an incomplete pool.
    assert _pod(_run(objects, allocator.AllocatorSettings()))[0] == "scheduled"


def test_an_invalid_pool_fails_only_its_node() -> None:
    # Device gpu-0 twice in pool-a of node-a: the pod goes to node-b.
    objects = [
        dclass(),
        rslice("a1", [dev("gpu-0")], node="node-a", count=2),
        rslice("a2", [dev("gpu-0")], node="node-a", count=2),
        rslice("b", [dev("gpu-0")], node="node-b", pool="pool-b"),
        claim("c", req()),
        pod("p", "c"),
    ]
    assert _pod(_run(objects))[:2] == ("scheduled", "node-b")
    status, _, error = _pod(_run(objects[:3] + objects[4:]))
    assert status == "unschedulable"
    assert error is not None and "1 invalid resource pools were encountered" in error


def test_an_invalid_pool_is_named_in_the_nodes_reason() -> None:
    objects = [
        dclass(),
        rslice("a1", [dev("gpu-0")], count=2),
        rslice("a2", [dev("gpu-0")], count=2),
        claim("c", req()),
    ]
    inputs = manifests.decode_objects(objects)
    run = simulation.simulate(
        inputs,
        explain=True,
        settings=simulation.SimulationSettings(allocator=SINCE_135),
    )
    (outcome,) = run.outcomes
    assert outcome.status == "unschedulable"
    assert [e.reason for e in outcome.explanations] == [allocator.INVALID_POOLS]


def test_a_missing_device_class_is_unschedulable() -> None:
    objects = [
        dclass(),
        rslice("s", [dev("gpu-0")]),
        claim("c", {"name": "r", "firstAvailable": [req("a"), req("b", cls="nope")]}),
        pod("p", "c"),
    ]
    status, _, error = _pod(_run(objects))
    assert (status, error) == ("unschedulable", "request r/b: device class nope does not exist")


def test_from_1_38_all_over_an_incomplete_pool_fails_only_its_node() -> None:
    objects = [
        dclass(),
        rslice("a", [dev("gpu-0")], node="node-a", count=2),
        rslice("b", [dev("gpu-0")], node="node-b", pool="pool-b"),
        claim("c", req(mode="All")),
        pod("p", "c"),
    ]
    since_138 = allocator.AllocatorSettings(
        skip_unusable_pools=True, all_mode_unusable_pool_fails_node=True
    )
    assert _pod(_run(objects, since_138))[:2] == ("scheduled", "node-b")
    status, _, error = _pod(_run(objects))
    assert status == "error"
    assert error is not None and "is currently being updated" in error
    # Alone, node-a makes the pod Unschedulable, for the reason the allocator gives.
    status, _, error = _pod(_run(objects[:2] + objects[3:], since_138))
    assert status == "unschedulable"
    assert error is not None and "1 claim default/c, request r: asks for all devices" in error


def test_a_device_picked_with_admin_access_is_not_free_for_another_claim_of_the_pod() -> None:
    # The scheduler marks a device an adminAccess request picks as being allocated: the
    # pod's other claim cannot have both devices.
    objects = [
        dclass(),
        rslice("s", [dev("gpu-0"), dev("gpu-1")]),
        claim("admin", req(admin=True)),
        claim("both", req(count=2)),
        pod("p", "admin", "both"),
    ]
    assert _pod(_run(objects))[0] == "unschedulable"
    # Without the admin claim, or as a claim of its own, both devices are free.
    assert _pod(_run([*objects[:2], objects[3], pod("p", "both")]))[0] == "scheduled"
