"""The pure parts of dralet.kube: version shapes, version choice, the pool diff."""

from __future__ import annotations

from typing import Any

import pytest

from dralet import kube
from dralet.kube import shapes, slices, versions

NODE = slices.NodeOwner("node-a", "uid-1")


def test_slice_round_trips_between_nested_and_flat() -> None:
    flat = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "spec": {"devices": [{"name": "d0", "attributes": {"a": {"int": 1}}}]},
    }
    nested = shapes.to_version(flat, "v1beta1")
    assert nested["apiVersion"] == "resource.k8s.io/v1beta1"
    assert nested["spec"]["devices"] == [{"name": "d0", "basic": {"attributes": {"a": {"int": 1}}}}]
    assert shapes.from_version(nested, "v1beta1") == flat
    assert shapes.to_version(flat, "v1beta2")["spec"] == flat["spec"]


def test_claim_requests_round_trip() -> None:
    nested = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "a",
                        "deviceClassName": "c",
                        "count": 2,
                        "allocationMode": "ExactCount",
                    },
                    {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]},
                ]
            }
        },
    }
    flat = shapes.from_version(nested, "v1beta1")
    assert flat["spec"]["devices"]["requests"] == [
        {
            "name": "a",
            "exactly": {"deviceClassName": "c", "count": 2, "allocationMode": "ExactCount"},
        },
        {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]},
    ]
    assert shapes.to_version(flat, "v1beta1") == nested
    template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "spec": {"spec": nested["spec"]},
    }
    assert shapes.from_version(template, "v1beta1")["spec"]["spec"] == flat["spec"]


def test_newest_supported_version() -> None:
    assert versions.newest_supported(["v1beta1"]) == "v1beta1"
    assert versions.newest_supported(["v1beta1", "v1beta2", "v1"]) == "v1"
    with pytest.raises(kube.UnsupportedServerError, match="DynamicResourceAllocation"):
        versions.newest_supported(["v1alpha3"])


def _live(plan: slices.PoolPlan, chunks: Any) -> list[dict[str, Any]]:
    """The slices a server would hold after ``plan`` was carried out on nothing."""
    return [
        {"metadata": {"name": f"s{i}", "resourceVersion": str(i)}, "spec": dict(w.spec)}
        for i, w in enumerate(plan.writes)
    ]


def test_plan_is_empty_when_live_slices_match() -> None:
    chunks = [[{"name": "d0"}], [{"name": "d1"}]]
    first = slices.plan_pool(
        chunks, [], driver="d.example.com", pool="p", node=NODE, last_generation=None
    )
    assert first.generation == 0 and [w.verb for w in first.writes] == ["create", "create"]
    live = _live(first, chunks)
    again = slices.plan_pool(
        chunks, live, driver="d.example.com", pool="p", node=NODE, last_generation=0
    )
    assert again.writes == () and again.generation == 0
    # Everything wiped: re-created at the generation last published, not at 0 again.
    wiped = slices.plan_pool(
        chunks, [], driver="d.example.com", pool="p", node=NODE, last_generation=4
    )
    assert wiped.generation == 4 and [w.verb for w in wiped.writes] == ["create", "create"]


def test_plan_bumps_generation_past_every_seen_one() -> None:
    live = [
        {
            "metadata": {"name": "s0", "resourceVersion": "9"},
            "spec": {
                "driver": "d.example.com",
                "nodeName": "node-a",
                "devices": [{"name": "old"}],
                "pool": {"name": "p", "generation": 6, "resourceSliceCount": 1},
            },
        }
    ]
    plan = slices.plan_pool(
        [[{"name": "new"}]], live, driver="d.example.com", pool="p", node=NODE, last_generation=2
    )
    assert plan.generation == 7
    assert [(w.verb, w.name, w.resource_version) for w in plan.writes] == [("update", "s0", "9")]


def test_slice_object_owner_reference() -> None:
    spec = slices.slice_spec([], driver="d.example.com", pool="p", node=NODE, generation=0, count=1)
    obj = slices.slice_object(spec, driver="d.example.com", node=NODE)
    assert obj["metadata"]["generateName"] == "node-a-d.example.com-"
    assert obj["metadata"]["ownerReferences"][0]["controller"] is True
    assert (
        "ownerReferences"
        not in slices.slice_object(spec, driver="d.example.com", node=slices.NodeOwner("node-a"))[
            "metadata"
        ]
    )
