"""Wire compatibility: every message built from raw protobuf bytes with the documented
field numbers decodes through our stubs, and our stubs encode to exactly those bytes.

A transcription error in a field number, a type or a package name fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import Message

from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    drahealth_v1alpha1_pb2,
    pluginregistration_v1_pb2,
)

VARINT, LEN = 0, 2


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: bytes | str | int | bool) -> bytes:
    if isinstance(value, bool | int):
        return varint(number << 3 | VARINT) + varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | LEN) + varint(len(data)) + data


def claim_bytes(namespace: str, uid: str, name: str) -> bytes:
    return field(1, namespace) + field(2, uid) + field(3, name)


def device_bytes(version: str) -> bytes:
    raw = field(1, "req-a") + field(1, "req-b") + field(2, "pool-1") + field(3, "gpu-0")
    raw += field(4, "vendor.com/gpu=a") + field(4, "vendor.com/gpu=b")
    if version == "v1":
        raw += field(5, "share-7")
    return raw


def map_entry(key: str, value: bytes) -> bytes:
    return field(1, key) + field(2, value)


DRA = {"v1beta1": dra_v1beta1_pb2, "v1": dra_v1_pb2}


@pytest.mark.parametrize("version", ["v1beta1", "v1"])
def test_dra_service_full_names(version: str) -> None:
    service = DRA[version].DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    for method in service.methods:
        assert not method.client_streaming and not method.server_streaming


def test_registration_and_health_service_full_names() -> None:
    reg = pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"
    assert [m.name for m in reg.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    health = drahealth_v1alpha1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert health.full_name == "v1alpha1.DRAResourceHealth"
    (watch,) = health.methods
    assert watch.name == "NodeWatchResources" and watch.server_streaming


def roundtrip(message: Message, raw: bytes, check: Callable[[Any], None]) -> None:
    decoded = type(message)()
    decoded.ParseFromString(raw)
    check(decoded)
    assert decoded.SerializeToString(deterministic=True) == raw
    assert message.SerializeToString(deterministic=True) == raw


@pytest.mark.parametrize("version", ["v1beta1", "v1"])
def test_prepare_request(version: str) -> None:
    pb2 = DRA[version]
    raw = field(1, claim_bytes("ns", "uid-1", "claim-a")) + field(
        1, claim_bytes("ns2", "uid-2", "b")
    )
    message = pb2.NodePrepareResourcesRequest(
        claims=[
            pb2.Claim(namespace="ns", uid="uid-1", name="claim-a"),
            pb2.Claim(namespace="ns2", uid="uid-2", name="b"),
        ]
    )

    def check(m: Any) -> None:
        assert [(c.namespace, c.uid, c.name) for c in m.claims] == [
            ("ns", "uid-1", "claim-a"),
            ("ns2", "uid-2", "b"),
        ]

    roundtrip(message, raw, check)


@pytest.mark.parametrize("version", ["v1beta1", "v1"])
def test_prepare_response(version: str) -> None:
    pb2 = DRA[version]
    entry = field(1, device_bytes(version)) + field(2, "")
    failed = field(2, "boom")
    raw = field(1, map_entry("uid-1", entry)) + field(1, map_entry("uid-2", failed))
    device = pb2.Device(
        request_names=["req-a", "req-b"],
        pool_name="pool-1",
        device_name="gpu-0",
        cdi_device_ids=["vendor.com/gpu=a", "vendor.com/gpu=b"],
    )
    if version == "v1":
        device.share_id = "share-7"
    message = pb2.NodePrepareResourcesResponse()
    message.claims["uid-1"].devices.append(device)
    message.claims["uid-2"].error = "boom"

    def check(m: Any) -> None:
        (d,) = m.claims["uid-1"].devices
        assert (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) == (
            ["req-a", "req-b"],
            "pool-1",
            "gpu-0",
            ["vendor.com/gpu=a", "vendor.com/gpu=b"],
        )
        assert m.claims["uid-2"].error == "boom"
        if version == "v1":
            assert d.HasField("share_id") and d.share_id == "share-7"

    # Proto3 omits the empty error string of uid-1; build the canonical bytes without it.
    raw = field(1, map_entry("uid-1", field(1, device_bytes(version)))) + field(
        1, map_entry("uid-2", failed)
    )
    roundtrip(message, raw, check)
    assert entry  # the explicit empty error field is also accepted on the wire
    parsed = pb2.NodePrepareResourcesResponse()
    parsed.ParseFromString(field(1, map_entry("uid-1", entry)))
    assert parsed.claims["uid-1"].error == ""


def test_v1beta1_has_no_share_id_and_skips_it_as_unknown() -> None:
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    share = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share.number == 5 and share.has_presence
    decoded = dra_v1beta1_pb2.Device()
    decoded.ParseFromString(device_bytes("v1"))
    assert decoded.device_name == "gpu-0"


@pytest.mark.parametrize("version", ["v1beta1", "v1"])
def test_unprepare_messages(version: str) -> None:
    pb2 = DRA[version]
    request_raw = field(1, claim_bytes("ns", "uid-1", "claim-a"))
    roundtrip(
        pb2.NodeUnprepareResourcesRequest(
            claims=[pb2.Claim(namespace="ns", uid="uid-1", name="claim-a")]
        ),
        request_raw,
        lambda m: None,
    )
    response = pb2.NodeUnprepareResourcesResponse()
    response.claims["uid-1"].error = "still busy"
    roundtrip(
        response,
        field(1, map_entry("uid-1", field(1, "still busy"))),
        lambda m: m.claims["uid-1"].error == "still busy" or pytest.fail("error lost"),
    )


def test_registration_messages() -> None:
    raw = (
        field(1, "DRAPlugin")
        + field(2, "gpu.example.com")
        + field(3, "/var/lib/kubelet/plugins/x/dra.sock")
        + field(4, "v1.DRAPlugin")
        + field(4, "v1beta1.DRAPlugin")
    )

    def check(m: Any) -> None:
        assert (m.type, m.name, m.endpoint, list(m.supported_versions)) == (
            "DRAPlugin",
            "gpu.example.com",
            "/var/lib/kubelet/plugins/x/dra.sock",
            ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    roundtrip(
        pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin",
            name="gpu.example.com",
            endpoint="/var/lib/kubelet/plugins/x/dra.sock",
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        ),
        raw,
        check,
    )
    roundtrip(
        pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True, error="e"),
        field(1, True) + field(2, "e"),
        lambda m: (m.plugin_registered and m.error == "e") or pytest.fail("status lost"),
    )
    assert pluginregistration_v1_pb2.InfoRequest().SerializeToString() == b""
    assert pluginregistration_v1_pb2.RegistrationStatusResponse().SerializeToString() == b""


def test_health_messages() -> None:
    ident = field(1, "pool-1") + field(2, "gpu-3")
    health = (
        field(1, ident) + field(2, 2) + field(3, 1_700_000_000) + field(4, 45) + field(5, "xid 79")
    )
    raw = field(1, health)
    message = drahealth_v1alpha1_pb2.NodeWatchResourcesResponse(
        devices=[
            drahealth_v1alpha1_pb2.DeviceHealth(
                device=drahealth_v1alpha1_pb2.DeviceIdentifier(
                    pool_name="pool-1", device_name="gpu-3"
                ),
                health=drahealth_v1alpha1_pb2.UNHEALTHY,
                last_updated_time=1_700_000_000,
                health_check_timeout_seconds=45,
                message="xid 79",
            )
        ]
    )

    def check(m: Any) -> None:
        (d,) = m.devices
        assert (d.device.pool_name, d.device.device_name, d.health, d.last_updated_time) == (
            "pool-1",
            "gpu-3",
            drahealth_v1alpha1_pb2.UNHEALTHY,
            1_700_000_000,
        )
        assert (d.health_check_timeout_seconds, d.message) == (45, "xid 79")

    roundtrip(message, raw, check)
    assert (drahealth_v1alpha1_pb2.UNKNOWN, drahealth_v1alpha1_pb2.HEALTHY) == (0, 1)
