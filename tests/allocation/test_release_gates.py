"""The DRA gate defaults per release: ``dralet.gates`` says what kube_features.go says for
every release CI builds, and the three readers of it (the simulated scheduler's
``Features``, the publisher's served fields and validate's API shapes) agree; 1.38 locks
the gates upstream locks (k8s.io/kubernetes v1.38.0-beta.0 pkg/features/kube_features.go)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from dralet import gates, releases
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


_RELEASES = Path(__file__).resolve().parents[2] / "k8s" / "releases"
_SPEC = re.compile(
    r'version\.MustParse\("1\.(\d+)"\), Default: (true|false), PreRelease: '
    r"featuregate\.(\w+)(?:, LockToDefault: (true|false))?"
)


def _kube_features(release: str) -> str:
    """pkg/features/kube_features.go of ``release`` from the Go module cache that
    ``make k8s`` fills."""
    try:
        cache = subprocess.run(
            ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        cache = ""
    path = Path(cache) / f"k8s.io/kubernetes@{release}" / "pkg/features/kube_features.go"
    if not cache or not path.is_file():
        reason = f"k8s.io/kubernetes@{release} is not in the Go module cache: `make k8s`"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path.read_text()


def _built_releases() -> list[str]:
    lines = _RELEASES.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("release", _built_releases())
def test_the_gate_table_is_what_kube_features_go_says(release: str) -> None:
    source = _kube_features(release)
    minor = int(release.split(".")[1])
    for gate in gates.DRA_GATES:
        block = re.search(rf"\n\t{gate.name}: \{{\n(.*?)\n\t\}},", source, re.S)
        assert block is not None, (release, gate.name)
        specs = [(int(m[0]), m[1] == "true", m[3] == "true") for m in _SPEC.findall(block[1])]
        assert specs, (release, gate.name)
        assert specs[0][0] == gate.alpha_from, (release, gate.name)
        for since, default, locked in specs:
            if since <= minor:
                assert gate.on_by_default(since) == default, (release, gate.name, since)
                assert gate.locked(since) == locked, (release, gate.name, since)
