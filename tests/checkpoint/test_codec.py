"""Checkpoint files written by other releases: the previous schema (v1) is migrated, a
newer release's added fields still verify, a future schema is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dralet.checkpoint import codec
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord
from dralet.node.backend import ClaimRef, ClaimUID
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
                devices=(DeviceRecord(pool="node-a", device="gpu-1"),),
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
