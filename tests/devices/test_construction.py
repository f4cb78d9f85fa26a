"""A driver author's values are checked when they are made, with the rule that
``dralet validate`` and the API server apply, not at publish time."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import dralet


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad_Name"}, "name must be a DNS label"),
        ({"name": ""}, "name must not be empty"),
        ({"name": "d", "attributes": {"ratio": 1.5}}, "attribute 'ratio' is a float"),
        ({"name": "d", "attributes": {"bad name": "x"}}, "'bad name'"),
        ({"name": "d", "attributes": {"v": dralet.Version("v1.0")}}, "not semantic version"),
        ({"name": "d", "attributes": {"m": "x" * 65}}, "longer than 64"),
        ({"name": "d", "attributes": {"n": 2**63}}, "not a 64-bit integer"),
        ({"name": "d", "capacity": {"memory": "lots"}}, "'lots' is not a Kubernetes quantity"),
        ({"name": "d", "attributes": {f"a{i}": i for i in range(33)}}, "must not exceed 32"),
        (
            {"name": "d", "taints": (dralet.DeviceTaint("bad key!", "NoSchedule"),)},
            "taint key 'bad key!'",
        ),
        (
            {"name": "d", "capacity": {"m": dralet.Capacity("1Gi", dralet.RequestPolicy("1Gi"))}},
            "needs allowMultipleAllocations",
        ),
        (
            {
                "name": "d",
                "consumes_counters": tuple(
                    dralet.CounterConsumption(f"s{i}", {"c": "1"}) for i in range(3)
                ),
            },
            "at most 2",
        ),
    ],
)
def test_a_bad_device_is_refused_when_it_is_made(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        dralet.Device(**kwargs)


def test_a_good_device_is_made() -> None:
    device = dralet.Device(
        name="gpu-0",
        attributes={"model": "X1", "index": 0, "ok": True, "driver": dralet.Version("1.2.3")},
        capacity={"memory": "80Gi"},
    )
    assert device.name == "gpu-0"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"driver_name": "Bad_Driver!", "node_name": "n"}, "driver_name 'Bad_Driver!'"),
        ({"driver_name": "gpu.example.com", "node_name": ""}, "node_name '': must not be empty"),
        ({"driver_name": "gpu.example.com", "node_name": "Node_A"}, "node_name 'Node_A'"),
    ],
)
def test_bad_driver_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        dralet.DriverSettings(plugin_dir=Path("/tmp/p"), **kwargs)


def test_taint_keys_and_values_follow_the_label_rules_the_server_applies() -> None:
    # A taint key is a label key (k8s.io/kubernetes v1.37.2 validateDeviceTaint), not an
    # attribute name: '-' and '.' are allowed after the domain.
    dralet.Device(name="d", taints=(dralet.DeviceTaint("example.com/needs-care", "NoSchedule"),))
    with pytest.raises(ValueError, match="value 'not ok'"):
        dralet.Device(
            name="d", taints=(dralet.DeviceTaint("example.com/t", "NoSchedule", "not ok"),)
        )
    with pytest.raises(ValueError, match="binding condition 'bad condition'"):
        dralet.Device(
            name="d",
            binding_conditions=("bad condition",),
            binding_failure_conditions=("Failed",),
        )
