"""Converting ResourceClaims, templates and ResourceSlices between resource.k8s.io versions.

Pure functions over JSON dicts. The canonical shape is v1's, which v1beta2 shares:
a device's fields sit on the device, and a request is either ``exactly`` or
``firstAvailable``. v1beta1 nests a device's fields under ``basic`` and keeps a request's
``deviceClassName``, ``selectors``, ``allocationMode``, ``count`` ... on the request.
DeviceClass, Node and claim status have the same shape in every version.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["FLAT_VERSIONS", "NESTED_VERSIONS", "from_version", "to_version"]

JSONObject = dict[str, Any]

NESTED_VERSIONS = frozenset({"v1beta1"})
"""Versions with ``basic`` devices and flat requests."""
FLAT_VERSIONS = frozenset({"v1", "v1beta2"})
"""Versions with flat devices and ``exactly`` requests."""


def to_version(obj: Mapping[str, Any], version: str) -> JSONObject:
    """``obj`` in canonical (v1) shape, rewritten for ``version`` (``apiVersion`` too)."""
    converted = copy.deepcopy(dict(obj))
    _set_version(converted, version)
    if version in NESTED_VERSIONS:
        _walk(converted, device=_nest_device, request=_flatten_request)
    return converted


def from_version(obj: Mapping[str, Any], version: str) -> JSONObject:
    """``obj`` as served in ``version``, rewritten in canonical (v1) shape."""
    converted = copy.deepcopy(dict(obj))
    _set_version(converted, "v1")
    if version in NESTED_VERSIONS:
        _walk(converted, device=_unnest_device, request=_wrap_request)
    return converted


def _set_version(obj: JSONObject, version: str) -> None:
    api_version = str(obj.get("apiVersion") or "")
    if api_version.startswith("resource.k8s.io/"):
        obj["apiVersion"] = f"resource.k8s.io/{version}"


def _walk(obj: JSONObject, *, device: Any, request: Any) -> None:
    kind = obj.get("kind")
    if kind == "ResourceSlice":
        spec = obj.get("spec") or {}
        if isinstance(spec.get("devices"), list):
            spec["devices"] = [device(d) for d in spec["devices"]]
    elif kind == "ResourceClaim":
        _convert_claim_spec(obj.get("spec"), request)
    elif kind == "ResourceClaimTemplate":
        _convert_claim_spec((obj.get("spec") or {}).get("spec"), request)
    elif kind in {"ResourceSliceList", "ResourceClaimList", "ResourceClaimTemplateList"}:
        item_kind = kind.removesuffix("List")
        for item in obj.get("items") or []:
            item.setdefault("kind", item_kind)
            _walk(item, device=device, request=request)


def _convert_claim_spec(spec: Any, request: Any) -> None:
    if not isinstance(spec, dict):
        return
    devices = spec.get("devices")
    if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
        devices["requests"] = [request(r) for r in devices["requests"]]


def _nest_device(device: Mapping[str, Any]) -> JSONObject:
    if "basic" in device:
        return dict(device)
    fields = {k: v for k, v in device.items() if k != "name"}
    return {"name": device.get("name"), "basic": fields}


def _unnest_device(device: Mapping[str, Any]) -> JSONObject:
    if "basic" not in device:
        return dict(device)
    flat: JSONObject = {"name": device.get("name")}
    flat.update(device.get("basic") or {})
    return flat


def _flatten_request(request: Mapping[str, Any]) -> JSONObject:
    flat = {k: v for k, v in request.items() if k != "exactly"}
    flat.update(request.get("exactly") or {})
    return flat


def _wrap_request(request: Mapping[str, Any]) -> JSONObject:
    if "exactly" in request:
        return dict(request)
    if request.get("firstAvailable"):
        return {k: v for k, v in request.items() if k in {"name", "firstAvailable"}}
    exactly = {k: v for k, v in request.items() if k not in {"name", "firstAvailable"}}
    return {"name": request.get("name"), "exactly": exactly}
