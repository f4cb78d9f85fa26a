"""The stored form of a checkpoint, and migrations between schema versions.

The file is an envelope ``{"data": "<canonical JSON>", "checksum": "sha256:<hex>"}``. The
checksum covers the exact stored string, never a re-serialization, so a newer release
that adds a field can still verify an older file (the bug class that broke upgrades of
other drivers). Schema v2 is current; v1 (single-phase records, no boot ID) is read and
migrated. A file from a future schema is refused, never guessed at.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord

__all__ = ["API_GROUP", "CURRENT_VERSION", "CodecError", "decode", "encode"]

API_GROUP = "checkpoint.dralet.dev"
KIND = "DriverCheckpoint"
CURRENT_VERSION = 2


class CodecError(ValueError):
    """The bytes are not a checkpoint this release can trust."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def checksum(data: str) -> str:
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def _device_to_dict(d: DeviceRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"pool": d.pool, "device": d.device}
    if d.request_names:
        out["requestNames"] = list(d.request_names)
    if d.cdi_device_ids:
        out["cdiDeviceIds"] = list(d.cdi_device_ids)
    if d.admin_access:
        out["adminAccess"] = True
    if d.share_id:
        out["shareId"] = d.share_id
    if d.backend_state:
        out["backendState"] = dict(d.backend_state)
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


def _device_from_dict(d: Mapping[str, Any]) -> DeviceRecord:
    return DeviceRecord(
        pool=str(d["pool"]),
        device=str(d["device"]),
        request_names=tuple(d.get("requestNames", ())),
        cdi_device_ids=tuple(d.get("cdiDeviceIds", ())),
        admin_access=bool(d.get("adminAccess", False)),
        share_id=str(d.get("shareId", "")),
        backend_state=dict(d.get("backendState", {})),
    )


def _from_v2(doc: Mapping[str, Any]) -> Checkpoint:
    claims: dict[str, ClaimRecord] = {}
    for uid, r in doc.get("claims", {}).items():
        claims[uid] = ClaimRecord(
            uid=uid,
            namespace=str(r["namespace"]),
            name=str(r["name"]),
            state=ClaimState(r["state"]),
            devices=tuple(_device_from_dict(d) for d in r.get("devices", ())),
            cdi_spec=r.get("cdiSpec"),
            finalizer_added=bool(r.get("finalizerAdded", False)),
            boot_id=str(r.get("bootId", "")),
            updated_at=str(r.get("updatedAt", "")),
        )
    return Checkpoint(
        driver=str(doc.get("driver", "")), boot_id=str(doc.get("bootId", "")), claims=claims
    )


def _migrate_v1(doc: Mapping[str, Any]) -> dict[str, Any]:
    """v1 stored only completed claims ``{uid: {namespace, name, devices, cdiSpec}}``."""
    return {
        "apiVersion": f"{API_GROUP}/v2",
        "kind": KIND,
        "driver": doc.get("driver", ""),
        "bootId": "",
        "claims": {
            uid: {**r, "state": ClaimState.PREPARE_COMPLETED.value, "finalizerAdded": False}
            for uid, r in doc.get("preparedClaims", {}).items()
        },
    }


_MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {1: _migrate_v1}


def decode(raw: bytes) -> tuple[Checkpoint, int]:
    """Verify and parse stored bytes; returns the checkpoint and the schema version read."""
    if not raw.strip():
        raise CodecError("file is empty")
    try:
        envelope = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"not JSON ({exc})") from exc
    if not isinstance(envelope, dict) or not isinstance(envelope.get("data"), str):
        raise CodecError("not a checkpoint envelope (no 'data' string)")
    data: str = envelope["data"]
    if envelope.get("checksum") != checksum(data):
        raise CodecError("checksum mismatch: the file was changed or truncated")
    try:
        doc = json.loads(data)
        api_version = str(doc.get("apiVersion", ""))
        group, _, version_text = api_version.partition("/")
        if group != API_GROUP or doc.get("kind") != KIND or not version_text.startswith("v"):
            raise CodecError(f"unknown checkpoint type {api_version!r} {doc.get('kind')!r}")
        version = int(version_text[1:])
        if version > CURRENT_VERSION:
            raise CodecError(
                f"written by a newer dralet (schema v{version}, this release reads up to "
                f"v{CURRENT_VERSION}); refusing to guess"
            )
        while version < CURRENT_VERSION:
            if version not in _MIGRATIONS:
                raise CodecError(f"schema v{version} is too old to migrate")
            doc = _MIGRATIONS[version](doc)
            version += 1
        return _from_v2(doc), int(version_text[1:])
    except CodecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"malformed content ({type(exc).__name__}: {exc})") from exc
