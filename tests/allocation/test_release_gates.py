"""The DRA gate defaults per release, held in three places (the simulated scheduler's
``Features``, the publisher's served fields and validate's API shapes), agree; and 1.38
locks the gates upstream locks (k8s.io/kubernetes v1.38.0-beta.0
pkg/features/kube_features.go)."""

from __future__ import annotations

import pytest

from dralet import releases
from dralet.allocation.features import GATES, Features, LockedGateError
from dralet.kube import features as served
from dralet.validation.targets import Target


def _server(release: str) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


@pytest.mark.parametrize("release", releases.KUBERNETES_RELEASES)
def test_the_three_gate_tables_agree_on_every_release(release: str) -> None:
    features = Features.for_release(release)
    published = served.served_features(_server(release))
    for feature in served.FEATURES:
        assert (feature.gate in published) == getattr(features, GATES[feature.gate]), (
            release,
            feature.gate,
        )
    shape = Target(release).shape("resource.k8s.io/v1beta2")
    if shape is not None:
        assert shape.consumable_capacity == features.consumable_capacity


def test_1_38_defaults_every_ga_gate_on_and_keeps_list_attributes_alpha() -> None:
    features = Features.for_release("1.38")
    assert features.partitionable_devices and features.device_taints
    assert features.consumable_capacity and features.binding_conditions
    assert features.device_taint_rules
    assert not features.list_type_attributes


@pytest.mark.parametrize(
    "gate",
    [
        "DRAPartitionableDevices",
        "DRADeviceBindingConditions",
        "DRADeviceTaints",
        "DRADeviceTaintRules",
    ],
)
def test_1_38_refuses_to_turn_off_a_locked_gate_that_1_37_lets_go(gate: str) -> None:
    with pytest.raises(LockedGateError, match=f"{gate} is locked to true"):
        Features.for_release("1.38").with_gates({gate: False})
    assert not getattr(Features.for_release("1.37").with_gates({gate: False}), GATES[gate])
    assert getattr(Features.for_release("1.38").with_gates({gate: True}), GATES[gate])


def test_consumable_capacity_is_ga_but_not_locked_in_1_38() -> None:
    features = Features.for_release("1.38").with_gates({"DRAConsumableCapacity": False})
    assert not features.consumable_capacity


def test_a_1_38_server_serves_locked_fields_whatever_the_operator_says() -> None:
    off = {"DRADeviceTaints": False, "DRAConsumableCapacity": False}
    assert served.served_features((1, 38), off) == {
        "DRAPartitionableDevices",
        "DRADeviceBindingConditions",
        "DRADeviceTaints",
    }
    assert "DRADeviceTaints" not in served.served_features((1, 37), off)
