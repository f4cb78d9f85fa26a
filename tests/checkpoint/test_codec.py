"""Checkpoint files written by other releases: the previous schema (v1) is migrated, a
newer release's added fields still verify, a future schema is refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dralet.checkpoint import codec, database
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord
from dralet.node.backend import AllocatedDevice, ClaimRef, ClaimUID, DeviceConfig
from dralet.node.claims import records
from tests.recovery.nodekit import EngineNode

UID = "0b8f3a52-6f8e-4a59-9d2c-3c1f4d0e7a11"
SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "gpu.example.com/claim",
    "devices": [
        {
            "name": f"{UID}-gpu-1",
            "containerEdits": {"env": ["EXAMPLE_GPU_1=GPU-x"]},
        }
    ],
}


def envelope(document: dict[str, Any], *, data: str | None = None) -> bytes:
    """Stored bytes for ``document``; ``data`` overrides the exact stored string."""
    text = data if data is not None else json.dumps(document)
    return json.dumps({"data": text, "checksum": codec.checksum(text)}).encode()


def v1_document() -> dict[str, Any]:
    return {
        "apiVersion": "checkpoint.dralet.dev/v1",
        "kind": "DriverCheckpoint",
        "driver": "gpu.example.com",
        "preparedClaims": {
            UID: {
                "namespace": "default",
                "name": "train",
                "devices": [
                    {
                        "pool": "node-a",
                        "device": "gpu-1",
                        "requestNames": ["gpu"],
                        "cdiDeviceIds": [f"gpu.example.com/claim={UID}-gpu-1"],
                    }
                ],
                "cdiSpec": SPEC,
            }
        },
    }


def test_v1_checkpoint_is_migrated() -> None:
    checkpoint, version = codec.decode(envelope(v1_document()))
    assert version == 1
    record = checkpoint.claims[UID]
    assert record.state == ClaimState.PREPARE_COMPLETED
    assert (record.namespace, record.name) == ("default", "train")
    assert [d.device for d in record.devices] == ["gpu-1"]
    assert record.cdi_spec == SPEC
    assert codec.decode(codec.encode(checkpoint))[0] == checkpoint  # saved back as v2


async def test_v1_checkpoint_on_disk_is_served_recovered_and_unprepared(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    node.settings.plugin_dir.mkdir(parents=True)
    node.settings.checkpoint_path.write_bytes(envelope(v1_document()))
    node.backend.mark_in_use("gpu-1", UID)

    report = await node.restart().recover()

    assert report.fail_closed == ""
    assert report.count("spec-rewritten") == 1  # v1 kept the spec; it is rewritten from it
    assert json.loads(node.engine.specs.path_for(UID).read_text()) == SPEC
    assert node.backend.in_use() == {"gpu-1": UID}
    ref = node.engine.known_claims()[UID]
    assert await node.unprepare(ClaimRef(ClaimUID(UID), ref.namespace, ref.name)) == {UID: ""}
    assert node.backend.in_use() == {}
    assert not node.engine.specs.path_for(UID).exists()
    assert node.checkpoint().claims == {}


def test_fields_added_by_a_newer_release_still_verify() -> None:
    checkpoint = Checkpoint(
        driver="gpu.example.com",
        boot_id="boot-1",
        claims={
            UID: ClaimRecord(
                uid=UID,
                namespace="default",
                name="train",
                state=ClaimState.PREPARE_COMPLETED,
                devices=(
                    DeviceRecord(AllocatedDevice(request="gpu", pool="node-a", device="gpu-1")),
                ),
                cdi_spec=SPEC,
            )
        },
    )
    document = json.loads(json.loads(codec.encode(checkpoint))["data"])
    document["addedLater"] = {"anything": [1, 2]}
    document["claims"][UID]["healthChecked"] = True
    document["claims"][UID]["devices"][0]["numaNode"] = 1
    # Another release's serializer: other key order and spacing. The checksum covers the
    # exact stored string, so nothing has to re-serialize the same way.
    data = json.dumps(document, indent=1, sort_keys=False)
    raw = json.dumps({"checksum": codec.checksum(data), "data": data, "note": "extra"}).encode()

    decoded, version = codec.decode(raw)

    assert version == codec.CURRENT_VERSION
    assert decoded == checkpoint


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty"),
        (b"\x00\x00\x00", "not JSON"),
        (b'{"data": "{}", "checksum": "sha256:00"}', "checksum mismatch"),
        (b'{"checksum": "x"}', "envelope"),
    ],
)
def test_unusable_bytes_are_refused_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(codec.CodecError, match=reason):
        codec.decode(raw)


def test_future_schema_is_refused() -> None:
    document = {"apiVersion": "checkpoint.dralet.dev/v3", "kind": "DriverCheckpoint"}
    with pytest.raises(codec.CodecError, match="newer dralet"):
        codec.decode(envelope(document))


def test_truncated_file_is_refused() -> None:
    raw = codec.encode(Checkpoint(driver="gpu.example.com"))
    with pytest.raises(codec.CodecError):
        codec.decode(raw[: len(raw) // 2])


PREVIOUS_UID = "5f0c6a8e-1d2b-4c3e-9f4a-7b6c5d4e3f21"
PREVIOUS_ROW = (
    # A prepared claim exactly as the release before devices kept their allocation
    # stored it (its codec's output): configs and state mixed in ``backendState``, the
    # subrequest among the result's fields.
    '{"bootId":"boot-1","devices":[{"backendState":{"configs":[{"order":0,"parameters":'
    '{"driverVersion":"1"},"requests":[],"source":"class"},{"order":1,"parameters":'
    '{"sharing":{"strategy":"TimeSlicing"}},"requests":["gpu"],"source":"claim"}],'
    '"preparedState":{"config":"backend\'s own","index":1}},"cdiDeviceIds":'
    '["gpu.example.com/claim=5f0c6a8e-1d2b-4c3e-9f4a-7b6c5d4e3f21-gpu-1",'
    '"gpu.example.com/claim=5f0c6a8e-1d2b-4c3e-9f4a-7b6c5d4e3f21-gpu-1-1"],"device":"gpu-1",'
    '"pool":"node-a","requestNames":["gpu"],"resultFields":{"bindingConditions":["ready"],'
    '"consumedCapacity":{"memory":"8Gi"},"subrequest":"large","tolerations":[{"effect":'
    '"NoSchedule","key":"maintenance","operator":"Exists"}]}},{"adminAccess":true,'
    '"backendState":{"configs":[{"order":0,"parameters":{"driverVersion":"1"},"requests":[],'
    '"source":"class"},{"order":2,"parameters":{"mtu":9000},"requests":["nic"],"source":'
    '"claim"}],"preparedState":{}},"cdiDeviceIds":["gpu.example.com/claim='
    '5f0c6a8e-1d2b-4c3e-9f4a-7b6c5d4e3f21-nic-0-a1b2"],"device":"nic-0","pool":"node-a",'
    '"requestNames":["nic"],"shareId":"a1b2"}],"finalizerAdded":true,"name":"train",'
    '"namespace":"default","state":"PrepareCompleted","updatedAt":"2026-12-01T10:00:00Z"}'
)
CLASS_CONFIG = DeviceConfig("class", (), {"driverVersion": "1"})
GPU_CONFIG = DeviceConfig("claim", ("gpu",), {"sharing": {"strategy": "TimeSlicing"}})
NIC_CONFIG = DeviceConfig("claim", ("nic",), {"mtu": 9000})
PREVIOUS_GPU = AllocatedDevice(
    request="gpu",
    subrequest="large",
    pool="node-a",
    device="gpu-1",
    configs=(CLASS_CONFIG, GPU_CONFIG),
    consumed_capacity={"memory": "8Gi"},
    tolerations=({"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},),
    extra={"bindingConditions": ["ready"]},
)
PREVIOUS_NIC = AllocatedDevice(
    request="nic",
    pool="node-a",
    device="nic-0",
    admin_access=True,
    share_id="a1b2",
    configs=(CLASS_CONFIG, NIC_CONFIG),
)


def test_a_record_the_previous_release_stored_gives_the_backend_the_same_devices() -> None:
    row = database.decode_row(
        PREVIOUS_UID, PREVIOUS_ROW, database.row_checksum(PREVIOUS_UID, PREVIOUS_ROW)
    )

    gpu, nic = row.devices
    assert (gpu.allocated, nic.allocated) == (PREVIOUS_GPU, PREVIOUS_NIC)
    assert (gpu.state, nic.state) == ({"config": "backend's own", "index": 1}, {})
    assert gpu.prepared and nic.prepared
    assert (gpu.request_names, nic.request_names) == (("gpu",), ("nic",))
    assert gpu.cdi_device_ids[1] == f"gpu.example.com/claim={PREVIOUS_UID}-gpu-1-1"
    ref = ClaimRef(ClaimUID(PREVIOUS_UID), "default", "train")
    allocation = records.claim_allocation(ref, row.devices)
    assert allocation.devices == (PREVIOUS_GPU, PREVIOUS_NIC)
    assert allocation.configs == (CLASS_CONFIG, GPU_CONFIG, NIC_CONFIG)
    # Written back in the current form only, which reads as the same record.
    written = codec.encode_record(row)
    assert "backendState" not in written
    assert '"subrequest":"large"' in written
    assert codec.decode_record(PREVIOUS_UID, written) == row


def test_older_records_configs_without_source_and_state_beside_them_still_read() -> None:
    def device(backend_state: dict[str, Any]) -> str:
        stored = {"pool": "p", "device": "gpu-0", "requestNames": ["r"]}
        return json.dumps(
            {
                "namespace": "ns",
                "name": "c",
                "state": "PrepareStarted",
                "devices": [{**stored, "backendState": backend_state}],
            }
        )

    bare = codec.decode_record("u", device({"config": [{"a": 1}, {"a": 2}]})).devices[0]
    assert bare.allocated.configs == (
        DeviceConfig("claim", (), {"a": 1}),
        DeviceConfig("claim", (), {"a": 2}),
    )
    assert bare.allocated.request == "r"
    assert not bare.prepared
    assert bare.prepared_state == {}
    # Before the state had a key of its own, prepare's keys sat beside the config.
    beside = codec.decode_record("u", device({"config": [], "slot": 3})).devices[0]
    assert beside.state == {"slot": 3}
    assert beside.allocated.configs == ()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"request": 1}, "'request' must be str"),
        ({"configs": {"a": 1}}, "'configs' must be list"),
        ({"configs": ["x"]}, "device config must be an object"),
        ({"configs": [{"order": "1"}]}, "'order' must be int"),
        ({"configs": [{"parameters": []}]}, "'parameters' must be dict"),
        ({"resultFields": {"consumedCapacity": {"memory": 8}}}, "consumedCapacity"),
        ({"resultFields": {"tolerations": [1]}}, "tolerations"),
        ({"preparedState": []}, "'preparedState' must be dict"),
        ({"subrequest": ["large"]}, "'subrequest' must be str"),
    ],
)
def test_a_damaged_device_is_refused_with_a_reason(change: dict[str, Any], reason: str) -> None:
    # The current form of a record, with one of its device's fields damaged.
    row = json.loads(codec.encode_record(codec.decode_record(PREVIOUS_UID, PREVIOUS_ROW)))
    row["devices"][0].update(change)
    with pytest.raises(codec.CodecError, match=reason):
        codec.decode_record(PREVIOUS_UID, json.dumps(row))


@pytest.mark.parametrize(
    "stamp",
    [[1, 2], [1, 2, 3, 4], [1, 2, -3], [True, 2, 3], [1.0, 2, 3], ["1", 2, 3], "1,2,3", {}],
)
def test_a_damaged_spec_stamp_is_refused(stamp: object) -> None:
    row = json.loads(codec.encode_record(codec.decode_record(PREVIOUS_UID, PREVIOUS_ROW)))
    row["cdiSpecStamp"] = stamp
    with pytest.raises(codec.CodecError, match="cdiSpecStamp must be three counts"):
        codec.decode_record(PREVIOUS_UID, json.dumps(row))
    row["cdiSpecStamp"] = [1, 2, 3]
    assert codec.decode_record(PREVIOUS_UID, json.dumps(row)).cdi_spec_stamp == (1, 2, 3)


def test_a_decoded_record_holds_every_field_of_each_class_as_its_constructor_sets_them() -> None:
    """The codec builds records without their ``__init__``: each decoded object has every
    field its class declares, and equals the one the constructor makes."""
    record = ClaimRecord(
        uid="uid-1",
        namespace="default",
        name="claim",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(
            # Between them every field of a device is set.
            DeviceRecord(
                PREVIOUS_GPU,
                request_names=("gpu",),
                config_places=(2, 3),
                cdi_device_ids=("gpu.example.com/claim=uid-1-gpu-1",),
                external_cdi_ids=("other.example.com/x=y",),
                state={"index": 1},
            ),
            DeviceRecord(PREVIOUS_NIC, request_names=("nic",), config_places=(0, 2), state={}),
        ),
        cdi_spec={"cdiVersion": "0.5.0", "kind": "gpu.example.com/claim", "devices": []},
        cdi_spec_stamp=(1, 2, 3),
        device_metadata={"gpu": "{}"},
        finalizer_added=True,
        boot_id="boot-1",
        updated_at="2026-12-06T00:00:00Z",
    )
    decoded = codec.decode_record(record.uid, codec.encode_record(record))
    devices = decoded.devices
    for made in (decoded, *devices, *(d.allocated for d in devices)):
        assert set(vars(made)) == {f.name for f in dataclasses.fields(made)}, type(made)
    assert decoded == record
    assert dataclasses.replace(decoded, name="other").name == "other"
