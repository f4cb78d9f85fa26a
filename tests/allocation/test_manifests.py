"""Decoding manifests: version shapes, API defaults, and input the API server refuses."""

from __future__ import annotations

from typing import Any

import pytest

from dralet.allocation import manifests, model, simulation


def claim_v1(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [request]}},
    }


def test_defaults_exact_count_of_one() -> None:
    claim = manifests.decode_claim(claim_v1({"name": "r", "exactly": {"deviceClassName": "gpu"}}))
    assert claim.requests == (
        model.DeviceRequest(
            name="r",
            alternatives=(model.DeviceSubRequest(name="r", device_class_name="gpu", count=1),),
        ),
    )


def test_v1beta1_request_is_flat_and_template_spec_is_read() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "r", "deviceClassName": "gpu", "allocationMode": "All"}]
                }
            }
        },
    }
    claim = manifests.decode_claim(template)
    assert claim.key == "ns/t"
    assert claim.requests[0].alternatives[0].allocation_mode == "All"
    assert claim.requests[0].alternatives[0].count == 0


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            claim_v1({"name": "r", "exactly": {"deviceClassName": "gpu", "count": -1}}),
            "ResourceClaim ns/c: spec.devices.requests[0].exactly.count: Invalid value: -1: "
            "must be greater than zero",
        ),
        (
            claim_v1(
                {
                    "name": "r",
                    "exactly": {"deviceClassName": "g", "allocationMode": "All", "count": 2},
                }
            ),
            "ResourceClaim ns/c: spec.devices.requests[0].exactly.count: Invalid value: 2: "
            "must not be specified when allocationMode is 'All'",
        ),
        (
            claim_v1({"name": "r", "deviceClassName": "gpu"}),
            "ResourceClaim ns/c: spec.devices.requests[0]: exactly one of `exactly` or "
            "`firstAvailable` is required",
        ),
        (
            {**claim_v1({"name": "r"}), "apiVersion": "resource.k8s.io/v1alpha3"},
            "ResourceClaim ns/c: apiVersion 'resource.k8s.io/v1alpha3' is not one of "
            "resource.k8s.io/v1beta1, resource.k8s.io/v1beta2, resource.k8s.io/v1",
        ),
        (
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {
                    "driver": "d",
                    "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                    "nodeName": "n",
                    "allNodes": True,
                },
            },
            "ResourceSlice s: spec: exactly one of `nodeName`, `nodeSelector`, or `allNodes` "
            "is required, but multiple fields are set",
        ),
    ],
)
def test_refused_input(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.decode_objects([obj])
    assert str(caught.value) == message


def test_explain_records_each_rejection_reason() -> None:
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 2, "resourceSliceCount": 1},
            "devices": [
                {"name": "a", "attributes": {"model": {"string": "H100"}}},
                {"name": "b", "attributes": {"model": {"string": "A100"}}},
            ],
        },
    }
    stale = {**slice_, "metadata": {"name": "old"}}
    stale["spec"] = {
        **slice_["spec"],
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    }
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {},
    }
    claim = claim_v1(
        {
            "name": "r",
            "exactly": {
                "deviceClassName": "gpu",
                "count": 2,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.driver == "gpu.example.com" && '
                            'device.attributes["gpu.example.com"].model == "A100"'
                        }
                    }
                ],
            },
        }
    )
    inputs = manifests.decode_objects([slice_, stale, device_class, claim])
    (outcome,) = simulation.simulate(inputs, explain=True).outcomes
    assert outcome.status == "unschedulable"
    (on_node,) = outcome.explanations
    assert on_node.notes == (
        "pool gpu.example.com/p: slice old ignored, generation 1 is older than 2",
    )
    assert [(str(r.device), r.reason) for r in on_node.rejections] == [
        (
            "gpu.example.com/p/a",
            "claim ns/c: selector #0 is false: "
            'device.attributes["gpu.example.com"].model == "A100"',
        ),
        (
            "gpu.example.com/p/b",
            "picked, then given back: the requests after it could not be satisfied",
        ),
    ]
