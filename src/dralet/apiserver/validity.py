"""What the stand-in refuses as 422 Invalid: strict-schema errors for the release it plays
(through ``dralet.validation.schemas``, the loader ``dralet validate`` uses) and the Go
validation rules dralet relies on that schemas cannot express.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dralet import kubenames
from dralet.apiserver.kinds import Kind, major_minor
from dralet.kube import slices
from dralet.validation import schemas

__all__ = ["schema_errors", "semantic_errors"]

_MAX_DEVICES = slices.MAX_DEVICES_PER_SLICE
_SCHEMAS_OF = {(1, 38): (1, 37)}
"""Releases whose bundled schemas are those of another: no JSON field of resource.k8s.io
v1 or v1beta2 changed from 1.37 to 1.38 (k8s.io/api@v0.37.2 and @v0.38.0-beta.0
resource/*/types.go), so the 1.37 schemas check 1.38 objects until 1.38's are bundled."""


def schema_errors(obj: Mapping[str, Any], *, kubernetes_version: str) -> list[str]:
    """Every strict-schema error of ``obj`` (in its own apiVersion) for that version."""
    major, minor = major_minor(kubernetes_version)
    kind, api_version = str(obj.get("kind")), str(obj.get("apiVersion"))
    validator = schemas.validator_for(f"{major}.{minor}", api_version, kind)
    if validator is None and (major, minor) in _SCHEMAS_OF:
        major, minor = _SCHEMAS_OF[major, minor]
        validator = schemas.validator_for(f"{major}.{minor}", api_version, kind)
    if validator is None:
        return [f"no schema for {kind} {api_version} in {kubernetes_version}"]
    found = schemas.schema_findings(validator, dict(obj), api_version=api_version)
    return [finding.message for finding in found]


def device_status_key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """How the API keys a claim's ``status.devices`` list (and matches an entry to its
    allocation result): driver, pool, device, shareID."""
    return (
        str(entry.get("driver") or ""),
        str(entry.get("pool") or ""),
        str(entry.get("device") or ""),
        str(entry.get("shareID") or ""),
    )


def semantic_errors(kind: Kind, obj: Mapping[str, Any], *, kubernetes_version: str) -> list[str]:
    """The Go validation rules dralet relies on that schemas cannot express."""
    single_slash = major_minor(kubernetes_version) >= major_minor(kubenames.SINGLE_SLASH_RELEASE)
    metadata = obj.get("metadata") or {}
    problems = [
        f"metadata.name: {p}"
        for p in slices.dns_subdomain_problems(str(metadata.get("name") or ""), what="name")
    ]
    spec = obj.get("spec") or {}
    if kind.kind == "ResourceSlice":
        devices = spec.get("devices") or []
        if len(devices) > _MAX_DEVICES:
            problems.append(f"spec.devices: must have at most {_MAX_DEVICES} items")
        names = [d.get("name") for d in devices]
        if len(set(names)) != len(names):
            problems.append("spec.devices: device names must be unique")
        for device in devices:
            problems += [
                f"spec.devices: {p}"
                for p in slices.device_problems(device, single_slash=single_slash)
            ]
        chosen = [k for k in ("nodeName", "nodeSelector", "allNodes") if spec.get(k)]
        if len(chosen) != 1:
            problems.append(
                "spec: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required"
            )
        pool = spec.get("pool") or {}
        if int(pool.get("generation") or 0) < 0:
            problems.append("spec.pool.generation: must be greater than or equal to zero")
        if int(pool.get("resourceSliceCount") or 0) <= 0:
            problems.append("spec.pool.resourceSliceCount: must be greater than zero")
        problems += [
            f"spec.driver: {p}" for p in slices.driver_name_problems(str(spec.get("driver") or ""))
        ]
        problems += [
            f"spec.pool.name: {p}" for p in slices.pool_name_problems(str(pool.get("name") or ""))
        ]
    if kind.kind == "ResourceClaim":
        status = obj.get("status") or {}
        if status.get("reservedFor") and not status.get("allocation"):
            problems.append("status.reservedFor: may not be specified when `allocated` is not set")
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        allocated = {device_status_key(r) for r in results}
        for index, entry in enumerate(status.get("devices") or []):
            # pkg/apis/resource/validation validateDeviceStatus (1.37)
            if device_status_key(entry) not in allocated:
                problems.append(
                    f"status.devices[{index}]: Invalid value: must be an allocated device in "
                    "the claim"
                )
        for request in (spec.get("devices") or {}).get("requests") or []:
            mode = (request.get("exactly") or {}).get("allocationMode")
            if mode not in (None, "ExactCount", "All"):
                problems.append(
                    f"spec.devices.requests[{request.get('name')}].allocationMode: Unsupported "
                    f'value: "{mode}": supported values: "All", "ExactCount"'
                )
    return problems
