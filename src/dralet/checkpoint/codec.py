"""The stored form of a checkpoint, and migrations between schema versions.

The file is an envelope ``{"data": "<canonical JSON>", "checksum": "sha256:<hex>"}``. The
checksum covers the exact stored string, never a re-serialization, so a newer release
that adds a field can still verify an older file (the bug class that broke upgrades of
other drivers). Schema v2 is current; v1 (single-phase records, no boot ID) is read and
migrated. A file from a future schema is refused, never guessed at.

A device is stored as the backend was handed it (``request``, ``subrequest``, its
``configs`` each with its ``order`` among the claim's, the result's other fields in
``resultFields``) with ``preparedState`` once ``prepare_claim`` returned. Devices
written before they named their ``request`` (configs and state mixed in
``backendState``) are still read, and written back in the current form.

``decode`` takes any bytes at all and either returns a checkpoint or raises
``CodecError``: invalid UTF-8, lone surrogates, nesting or numbers past the parser's
limits and fields of the wrong type are all refused the same way, so a damaged file
always ends in the fail-closed path and never in an unexpected exception.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from dralet.checkpoint.allocated import AllocatedDevice, DeviceConfig
from dralet.checkpoint.model import (
    Checkpoint,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    construct,
)

__all__ = [
    "API_GROUP",
    "CURRENT_VERSION",
    "CodecError",
    "decode",
    "decode_record",
    "encode",
    "encode_record",
]

API_GROUP = "checkpoint.dralet.dev"
KIND = "DriverCheckpoint"
CURRENT_VERSION = 2


class CodecError(ValueError):
    """The bytes are not a checkpoint this release can trust."""


def _parse_json(text: str | bytes, what: str) -> Any:
    """``json.loads`` whose every failure is a ``CodecError``."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise CodecError(f"{what} is nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise CodecError(f"{what} is not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except ValueError as exc:  # JSONDecodeError, or a number past the digit limit
        raise CodecError(f"{what} is not JSON ({exc})") from exc


def _field(m: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """``m[key]`` of type ``kind``; ``default`` when absent (None: the field is required)."""
    value = m.get(key, default)
    if type(value) is kind:  # what JSON decodes to: no subclass, and a bool is no int
        return value
    if key not in m and default is None:
        raise CodecError(f"field {key!r} is missing")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CodecError(f"field {key!r} must be {kind.__name__}, not {type(value).__name__}")
    return value


def _strings(m: Mapping[str, Any], key: str) -> tuple[str, ...]:
    values = m.get(key)
    if type(values) is not list:
        if values is None and key not in m:
            return ()
        values = _field(m, key, list, [])  # raises, naming the field
    for v in values:
        if type(v) is not str:
            raise CodecError(f"field {key!r} must be a list of strings")
    return tuple(values)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise CodecError(f"{what} must be an object, not {type(value).__name__}")
    return value


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(value: Any) -> str:
    return _CANONICAL.encode(value)


def checksum(data: str) -> str:
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


_CONSUMED = "consumedCapacity"
_TOLERATIONS = "tolerations"


def _config_to_dict(config: DeviceConfig, order: int) -> dict[str, Any]:
    return {
        "source": config.source,
        "requests": list(config.requests),
        "parameters": dict(config.parameters),
        "order": order,
    }


def _device_to_dict(d: DeviceRecord) -> dict[str, Any]:
    a = d.allocated
    out: dict[str, Any] = {"pool": a.pool, "device": a.device, "request": a.request}
    if a.subrequest:
        out["subrequest"] = a.subrequest
    if d.request_names:
        out["requestNames"] = list(d.request_names)
    if d.cdi_device_ids:
        out["cdiDeviceIds"] = list(d.cdi_device_ids)
    if d.external_cdi_ids:
        out["externalCdiDeviceIds"] = list(d.external_cdi_ids)
    if a.admin_access:
        out["adminAccess"] = True
    if a.share_id:
        out["shareId"] = a.share_id
    if a.configs:
        out["configs"] = [
            _config_to_dict(c, order) for c, order in zip(a.configs, d.places, strict=True)
        ]
    fields = dict(a.extra)
    if a.consumed_capacity:
        fields[_CONSUMED] = dict(a.consumed_capacity)
    if a.tolerations:
        fields[_TOLERATIONS] = [dict(t) for t in a.tolerations]
    if fields:
        out["resultFields"] = fields
    if d.state is not None:
        out["preparedState"] = dict(d.state)
    return out


def _record_to_dict(r: ClaimRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": r.namespace,
        "name": r.name,
        "state": r.state.value,
        "devices": [_device_to_dict(d) for d in r.devices],
    }
    if r.cdi_spec is not None:
        out["cdiSpec"] = r.cdi_spec
    if r.cdi_spec_stamp is not None:
        out["cdiSpecStamp"] = list(r.cdi_spec_stamp)
    if r.device_metadata:
        out["deviceMetadata"] = dict(r.device_metadata)
    if r.finalizer_added:
        out["finalizerAdded"] = True
    if r.boot_id:
        out["bootId"] = r.boot_id
    if r.updated_at:
        out["updatedAt"] = r.updated_at
    return out


def to_document(cp: Checkpoint) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/v{CURRENT_VERSION}",
        "kind": KIND,
        "driver": cp.driver,
        "bootId": cp.boot_id,
        "claims": {uid: _record_to_dict(r) for uid, r in sorted(cp.claims.items())},
    }


def encode(cp: Checkpoint) -> bytes:
    data = _canonical(to_document(cp))
    return (_canonical({"checksum": checksum(data), "data": data}) + "\n").encode()


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def encode_record(record: ClaimRecord) -> str:
    """One claim's record as canonical JSON (a row of the record database)."""
    return _canonical(_record_to_dict(record))


def decode_record(uid: str, data: str) -> ClaimRecord:
    """The record ``encode_record`` made; any other input raises ``CodecError``."""
    try:
        record = _record_from_dict(uid, _parse_json(data, f"record of claim {uid[:64]!r}"))
    except RecursionError as exc:
        raise CodecError("content is nested too deeply") from exc
    # Only a surrogate escape can spell a lone surrogate, which no row could store
    # again: the (costly) write-back check runs just when the text holds one.
    if _SURROGATE_ESCAPE.search(data):
        _check_writable(_record_to_dict(record), "record")
    return record


def _check_writable(value: Any, what: str) -> None:
    """JSON escapes can spell lone surrogates, which no file or row can store: such a
    value could be read but never written back."""
    try:
        _canonical(value).encode()
    except UnicodeEncodeError as exc:
        raise CodecError(f"{what} holds a string with a lone surrogate") from exc
    except (RecursionError, ValueError) as exc:
        raise CodecError(f"{what} cannot be written back ({type(exc).__name__})") from exc


def _config_from_dict(value: Any) -> tuple[DeviceConfig, int]:
    c = _mapping(value, "a device config")
    source = _field(c, "source", str, "claim")
    order = _field(c, "order", int, 0)
    return (
        DeviceConfig(
            source="class" if source == "class" else "claim",
            requests=_strings(c, "requests"),
            parameters=_field(c, "parameters", dict, {}),
        ),
        order,
    )


def _configs(stored: Mapping[str, Any]) -> tuple[tuple[DeviceConfig, ...], tuple[int, ...]]:
    """A device's ``configs`` (each ``{"source", "requests", "parameters", "order"}``)
    and their places among the claim's."""
    pairs = [_config_from_dict(c) for c in _field(stored, "configs", list, [])]
    return tuple(c for c, _ in pairs), tuple(order for _, order in pairs)


def _legacy_configs(stored: Mapping[str, Any]) -> tuple[tuple[DeviceConfig, ...], tuple[int, ...]]:
    """``_configs``, or in records written before configs kept their source, ``config``
    (bare parameters, read as claim configs for every request)."""
    if "configs" in stored:
        return _configs(stored)
    bare = _field(stored, "config", list, [])
    configs = tuple(
        DeviceConfig(source="claim", requests=(), parameters=_mapping(p, "a device config"))
        for p in bare
    )
    return configs, tuple(range(len(configs)))


_LEGACY_STATE = "backendState"
"""Where records written before a device named its request had its configs
(``configs``, or the older ``config``) and prepare's state (``preparedState``, or the
older keys beside the config); read, never written."""
_LEGACY_SUBREQUEST = "subrequest"
"""The ``resultFields`` key such records kept the chosen subrequest under."""


def _result_fields(d: Mapping[str, Any], *, legacy: bool) -> tuple[Any, Any, Any, Any]:
    """``resultFields`` less what the device keeps apart, then ``consumedCapacity``,
    ``tolerations`` and (in older records) the subrequest, None each when absent. Copied
    only when something is taken out."""
    fields = _field(d, "resultFields", dict, {})
    if not fields or not (
        _CONSUMED in fields or _TOLERATIONS in fields or (legacy and _LEGACY_SUBREQUEST in fields)
    ):
        return fields, None, None, None
    rest = dict(fields)
    subrequest = rest.pop(_LEGACY_SUBREQUEST, None) if legacy else None
    return rest, rest.pop(_CONSUMED, None), rest.pop(_TOLERATIONS, None), subrequest


def _device_from_dict(value: Any) -> DeviceRecord:
    d = _mapping(value, "a device")
    request_names = _strings(d, "requestNames")
    state: Mapping[str, Any] | None = None
    if "request" in d:  # written by this release: every device names its request
        fields, capacity, tolerations, _ = _result_fields(d, legacy=False)
        configs, places = _configs(d) if "configs" in d else ((), ())
        subrequest = _field(d, "subrequest", str, "")
        if "preparedState" in d:
            state = _field(d, "preparedState", dict, None)
    else:
        fields, capacity, tolerations, subrequest = _result_fields(d, legacy=True)
        if subrequest is not None and type(subrequest) is not str:
            raise CodecError(f"field {_LEGACY_SUBREQUEST!r} must be str")
        legacy = _mapping(d.get(_LEGACY_STATE, {}), f"field {_LEGACY_STATE!r}")
        configs, places = _legacy_configs(legacy)
        if "preparedState" in legacy:
            state = _field(legacy, "preparedState", dict, None)
        else:
            # Before the state had a key of its own it sat beside the config: any other
            # key there was put by a prepare that returned.
            state = {k: v for k, v in legacy.items() if k not in ("config", "configs")} or None
    if capacity is not None and not (
        isinstance(capacity, dict) and all(type(v) is str for v in capacity.values())
    ):
        raise CodecError(f"field {_CONSUMED!r} must map names to quantities")
    if tolerations is not None and not (
        isinstance(tolerations, list) and all(isinstance(t, dict) for t in tolerations)
    ):
        raise CodecError(f"field {_TOLERATIONS!r} must be a list of objects")
    return construct(
        DeviceRecord,
        allocated=construct(
            AllocatedDevice,
            # Older records handed the backend the first of the request names.
            request=_field(d, "request", str, request_names[0] if request_names else ""),
            pool=_field(d, "pool", str, None),
            device=_field(d, "device", str, None),
            admin_access=_field(d, "adminAccess", bool, False),
            share_id=_field(d, "shareId", str, ""),
            configs=configs,
            subrequest=subrequest or "",
            # Decoded just now: the device may keep these objects as they are.
            consumed_capacity=capacity or {},
            tolerations=tuple(tolerations or ()),
            extra=fields,
        ),
        request_names=request_names,
        config_places=places,
        cdi_device_ids=_strings(d, "cdiDeviceIds"),
        external_cdi_ids=_strings(d, "externalCdiDeviceIds"),
        state=state,
    )


_STAMP_FIELDS = 3


_STATES = {s.value: s for s in ClaimState}


def _record_from_dict(uid: str, value: Any) -> ClaimRecord:
    # Every message names the claim; made only when it is needed (this runs per row).
    if not isinstance(value, dict):
        _mapping(value, f"claim {uid[:64]!r}")
    r: Mapping[str, Any] = value
    state = _STATES.get(_field(r, "state", str, None))
    if state is None:
        raise CodecError(f"claim {uid[:64]!r} has unknown state {r['state'][:64]!r}")
    cdi_spec = r.get("cdiSpec")
    if cdi_spec is not None and not isinstance(cdi_spec, dict):
        _mapping(cdi_spec, f"claim {uid[:64]!r} cdiSpec")
    stamp = r.get("cdiSpecStamp")
    if stamp is not None and not (
        type(stamp) is list
        and len(stamp) == _STAMP_FIELDS
        # what JSON decodes a whole number to, and no bool
        and type(stamp[0]) is int
        and type(stamp[1]) is int
        and type(stamp[2]) is int
        and min(stamp) >= 0
    ):
        raise CodecError(f"claim {uid[:64]!r} cdiSpecStamp must be three counts")
    metadata = r.get("deviceMetadata", {})
    if not isinstance(metadata, dict):
        _mapping(metadata, f"claim {uid[:64]!r} deviceMetadata")
    if metadata and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CodecError(f"claim {uid[:64]!r} deviceMetadata must map requests to text")
    return construct(
        ClaimRecord,
        uid=uid,
        namespace=_field(r, "namespace", str, None),
        name=_field(r, "name", str, None),
        state=state,
        devices=tuple([_device_from_dict(d) for d in _field(r, "devices", list, [])]),
        cdi_spec=cdi_spec,
        cdi_spec_stamp=(stamp[0], stamp[1], stamp[2]) if stamp is not None else None,
        device_metadata=metadata,
        finalizer_added=_field(r, "finalizerAdded", bool, False),
        boot_id=_field(r, "bootId", str, ""),
        updated_at=_field(r, "updatedAt", str, ""),
    )


def _from_v2(doc: Mapping[str, Any]) -> Checkpoint:
    claims = _mapping(doc.get("claims", {}), "'claims'")
    return Checkpoint(
        driver=_field(doc, "driver", str, ""),
        boot_id=_field(doc, "bootId", str, ""),
        claims={uid: _record_from_dict(uid, r) for uid, r in claims.items()},
    )


def _migrate_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """v1 stored only completed claims ``{uid: {namespace, name, devices, cdiSpec}}``."""
    prepared = _mapping(doc.get("preparedClaims", {}), "'preparedClaims'")
    return {
        "apiVersion": f"{API_GROUP}/v2",
        "kind": KIND,
        "driver": doc.get("driver", ""),
        "bootId": "",
        "claims": {
            uid: {
                **_mapping(r, f"claim {uid[:64]!r}"),
                "state": ClaimState.PREPARE_COMPLETED.value,
                "finalizerAdded": False,
            }
            for uid, r in prepared.items()
        },
    }


_MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {1: _migrate_v1}


def _version(doc: Mapping[str, Any]) -> int:
    api_version = doc.get("apiVersion")
    kind = doc.get("kind")
    group, _, version_text = str(api_version).partition("/")
    digits = version_text[1:]
    if (
        not isinstance(api_version, str)
        or group != API_GROUP
        or kind != KIND
        or not version_text.startswith("v")
        or not (digits.isascii() and digits.isdigit() and len(digits) <= 4)
    ):
        raise CodecError(f"unknown checkpoint type {str(api_version)[:80]!r} {str(kind)[:80]!r}")
    return int(digits)


def decode(raw: bytes) -> tuple[Checkpoint, int]:
    """Verify and parse stored bytes; returns the checkpoint and the schema version read.

    Any input at all either decodes or raises ``CodecError``; nothing else escapes.
    """
    if not raw.strip():
        raise CodecError("file is empty")
    envelope = _parse_json(raw, "the file")
    if not isinstance(envelope, dict) or not isinstance(envelope.get("data"), str):
        raise CodecError("not a checkpoint envelope (no 'data' string)")
    data: str = envelope["data"]
    try:
        expected = checksum(data)
    except UnicodeEncodeError as exc:
        raise CodecError(f"'data' holds a lone surrogate at index {exc.start}") from exc
    if envelope.get("checksum") != expected:
        raise CodecError("checksum mismatch: the file was changed or truncated")
    doc = _mapping(_parse_json(data, "'data'"), "'data'")
    _check_writable(doc, "'data'")
    version = read_version = _version(doc)
    if version > CURRENT_VERSION:
        raise CodecError(
            f"written by a newer dralet (schema v{version}, this release reads up to "
            f"v{CURRENT_VERSION}); refusing to guess"
        )
    try:
        while version < CURRENT_VERSION:
            if version not in _MIGRATIONS:
                raise CodecError(f"schema v{version} is too old to migrate")
            doc = _MIGRATIONS[version](doc)
            version += 1
        return _from_v2(doc), read_version
    except RecursionError as exc:
        raise CodecError("content is nested too deeply") from exc
