"""Health v1 (1.37+): the same messages as v1alpha1 in package v1, and the kubelet
emulator picks it as a 1.37 kubelet does."""

from __future__ import annotations

import pytest

from dralet import kubelet
from dralet.node import registration
from dralet.protocol.proto import drahealth_v1_pb2, drahealth_v1alpha1_pb2

BOTH = ["v1.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"]


def test_v1_is_v1alpha1_in_package_v1() -> None:
    v1 = drahealth_v1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert v1.full_name == "v1.DRAResourceHealth"
    (watch,) = v1.methods
    assert watch.name == "NodeWatchResources" and watch.server_streaming
    for name, message in drahealth_v1alpha1_pb2.DESCRIPTOR.message_types_by_name.items():
        ours = drahealth_v1_pb2.DESCRIPTOR.message_types_by_name[name]
        assert [(f.name, f.number, f.type) for f in ours.fields] == [
            (f.name, f.number, f.type) for f in message.fields
        ]


@pytest.mark.parametrize(
    ("advertised", "version", "picked"),
    [
        (BOTH, "1.37", "v1.DRAResourceHealth"),
        (BOTH, "1.36", "v1alpha1.DRAResourceHealth"),
        (["v1alpha1.DRAResourceHealth"], "1.37", "v1alpha1.DRAResourceHealth"),
        (["v1.DRAResourceHealth"], "1.34", ""),
        (["v1.DRAPlugin"], "1.37", ""),
    ],
)
def test_health_choice_follows_the_kubelet_release(
    advertised: list[str], version: str, picked: str
) -> None:
    assert kubelet.choose_health_service(advertised, kubelet_version=version) == picked


def test_dralet_advertises_both_health_versions() -> None:
    assert registration.HEALTH_SERVICE_VERSIONS == (
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    )
