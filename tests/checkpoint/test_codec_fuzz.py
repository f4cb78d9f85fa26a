"""Whatever bytes are at the checkpoint path, ``decode`` returns a checkpoint or raises
``CodecError``; nothing else ever escapes (so the driver always takes the fail-closed path)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dralet.checkpoint import codec
from dralet.checkpoint.allocated import AllocatedDevice, DeviceConfig
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord

UID = "0b8f3a52-6f8e-4a59-9d2c-3c1f4d0e7a11"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sample() -> Checkpoint:
    return Checkpoint(
        driver="gpu.example.com",
        boot_id="boot-1",
        claims={
            UID: ClaimRecord(
                uid=UID,
                namespace="default",
                name="train",
                state=ClaimState.PREPARE_COMPLETED,
                devices=(
                    DeviceRecord(
                        AllocatedDevice(
                            request="gpu",
                            subrequest="large",
                            pool="node-a",
                            device="gpu-1",
                            configs=(DeviceConfig("class", ("gpu",), {"mode": "x"}),),
                            consumed_capacity={"memory": "8Gi"},
                            tolerations=({"key": "k", "operator": "Exists"},),
                        ),
                        request_names=("gpu",),
                        config_places=(1,),
                        cdi_device_ids=(f"gpu.example.com/claim={UID}-gpu-1",),
                        state={"slot": 1},
                    ),
                ),
                cdi_spec={"cdiVersion": "0.5.0", "kind": "gpu.example.com/claim", "devices": []},
                finalizer_added=True,
                boot_id="boot-1",
            )
        },
    )


def _sealed(data: str) -> bytes:
    """An envelope whose checksum is right for ``data``: the content check is reached."""
    return json.dumps({"data": data, "checksum": codec.checksum(data)}).encode()


def _decodes_or_codec_error(raw: bytes) -> None:
    with contextlib.suppress(codec.CodecError):
        codec.decode(raw)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(alphabet=st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)

FIELD_NAMES = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "driver",
        "bootId",
        "claims",
        "preparedClaims",
        "namespace",
        "name",
        "state",
        "devices",
        "pool",
        "device",
        "requestNames",
        "cdiDeviceIds",
        "adminAccess",
        "shareId",
        "backendState",
        "cdiSpec",
        "finalizerAdded",
        "updatedAt",
    ]
)


def _mutate(value: Any, path: list[str], replacement: Any) -> Any:
    """``value`` with the object at ``path`` (keys, fuzzed) replaced."""
    if not path or not isinstance(value, dict):
        return replacement
    key = path[0] if path[0] in value else next(iter(value), path[0])
    return {**value, key: _mutate(value.get(key), path[1:], replacement)}


@FUZZ
@given(st.binary(max_size=512))
def test_any_bytes_decode_or_raise_codec_error(raw: bytes) -> None:
    _decodes_or_codec_error(raw)


@FUZZ
@given(st.binary(max_size=64), st.integers(min_value=0))
def test_damaged_real_files_decode_or_raise_codec_error(noise: bytes, at: int) -> None:
    raw = codec.encode(_sample())
    cut = at % (len(raw) + 1)
    _decodes_or_codec_error(raw[:cut] + noise + raw[cut:])


@FUZZ
@given(JSON_VALUES)
def test_any_json_document_with_a_valid_checksum_decodes_or_raises_codec_error(doc: Any) -> None:
    _decodes_or_codec_error(_sealed(json.dumps(doc)))
    _decodes_or_codec_error(json.dumps(doc).encode())


@FUZZ
@given(st.lists(FIELD_NAMES, min_size=1, max_size=5), JSON_VALUES, st.sampled_from([1, 2]))
def test_a_real_document_with_any_field_replaced_decodes_or_raises_codec_error(
    path: list[str], replacement: Any, version: int
) -> None:
    doc = codec.to_document(_sample())
    if version == 1:
        doc = {**doc, "apiVersion": f"{codec.API_GROUP}/v1", "preparedClaims": doc["claims"]}
    _decodes_or_codec_error(_sealed(json.dumps(_mutate(doc, path, replacement))))


DEEP = 200_000

HOSTILE: dict[str, bytes] = {
    "invalid-utf8": b'{"data": "\xff\xfe", "checksum": "x"}',
    "invalid-utf8-in-data": _sealed('{"apiVersion": "x"}')[:-2] + b'\xc3\x28"}',
    "lone-surrogate-in-data": b'{"data": "\\ud800", "checksum": "sha256:0"}',
    "lone-surrogate-in-document": _sealed(
        json.dumps(
            {
                **codec.to_document(_sample()),
                "driver": "\\ud800",
            }
        ).replace("\\\\ud800", "\\ud800")
    ),
    "deep-envelope": b"[" * DEEP + b"]" * DEEP,
    "deep-document": _sealed("[" * DEEP + "]" * DEEP),
    "huge-number": b'{"data": ' + b"9" * 100_000 + b"}",
    "huge-number-in-document": _sealed('{"apiVersion": ' + "9" * 100_000 + "}"),
    "huge-version": _sealed(
        json.dumps({"apiVersion": f"{codec.API_GROUP}/v" + "9" * 5000, "kind": codec.KIND})
    ),
    "unicode-digit-version": _sealed(
        json.dumps({"apiVersion": f"{codec.API_GROUP}/v\u0662", "kind": codec.KIND})
    ),
    "nul-bytes": b"\x00" * 64,
    "utf16": json.dumps({"data": "x", "checksum": codec.checksum("x")}).encode("utf-16"),
    "string-as-list": _sealed(
        json.dumps(
            {
                **codec.to_document(_sample()),
                "claims": {
                    UID: {
                        **codec.to_document(_sample())["claims"][UID],
                        "devices": [{"pool": "p", "device": "d", "requestNames": "gpu"}],
                    }
                },
            }
        )
    ),
    "null-namespace": _sealed(
        json.dumps(
            {
                **codec.to_document(_sample()),
                "claims": {UID: {**codec.to_document(_sample())["claims"][UID], "namespace": None}},
            }
        )
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_content_is_a_codec_error(name: str) -> None:
    with pytest.raises(codec.CodecError):
        codec.decode(HOSTILE[name])


def test_the_sample_still_round_trips() -> None:
    assert codec.decode(codec.encode(_sample())) == (_sample(), codec.CURRENT_VERSION)
