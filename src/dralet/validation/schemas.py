"""Structural validation against the Kubernetes OpenAPI schemas bundled with
kubernetes-validate (its strict variants, which refuse unknown fields).

One ``structure.Validator`` per (Kubernetes version, apiVersion, kind) is built on first
use and reused, resolving references into the version's shared definitions; every error
is reported, not only the first.

A release newer than the newest bundled schemas is checked with the newest ones: 1.38
(kubernetes-validate 1.37.0 bundles up to 1.37) adds and removes no JSON field in the
resource.k8s.io versions it serves (the ``json`` tags of k8s.io/api v0.37.2 and
v0.38.0-beta.0 resource/v1 and v1beta2 types.go are the same); what it stops serving is
decided by ``targets``, not by the schemas.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path as FilePath
from typing import Any

from dralet.validation import structure
from dralet.validation.diagnostics import Anchor, Finding, Path
from dralet.validation.structure import SchemaError, Validator

__all__ = [
    "RULE",
    "built_in_group",
    "dotted",
    "kinds",
    "schema_findings",
    "schema_release",
    "served_versions",
    "validator_for",
]

RULE = "DRA004"
_SCHEMA_PACKAGE = "kubernetes_validate"
_SCHEMA_FOLDER = "kubernetes-json-schema"
_GROUP_SUFFIX = re.compile(r"^([^./]*)(?:\.[^/]*)?/")
_OTHER_SHAPE_HINTS = {
    ("v1beta1", "exactly"): "v1beta1 requests are flat: move these fields up into the request",
    ("v1beta2", "basic"): "devices are flat from v1beta2 on: move these fields up into the device",
    ("v1", "basic"): "devices are flat in v1: move these fields up into the device",
}
"""Fields of another resource.k8s.io version's shape, with the fix."""
_ZERO_VALUE_ACCEPTED: frozenset[tuple[str, Path, str]] = frozenset(
    {
        ("DeviceClass", (), "spec"),
        ("DeviceTaintRule", (), "spec"),
        ("ResourceClaim", (), "spec"),
        ("ResourceClaimTemplate", (), "spec"),
        ("ResourceClaimTemplate", ("spec",), "spec"),
        ("ResourceSlice", ("spec", "pool"), "generation"),
        ("ResourceSlice", ("spec", "devices", "*", "capacity", "*"), "value"),
        ("ResourceSlice", ("spec", "devices", "*", "basic", "capacity", "*"), "value"),
        ("ResourceSlice", ("spec", "sharedCounters", "*", "counters", "*"), "value"),
        (
            "ResourceSlice",
            ("spec", "devices", "*", "consumesCounters", "*", "counters", "*"),
            "value",
        ),
        (
            "ResourceSlice",
            ("spec", "devices", "*", "basic", "consumesCounters", "*", "counters", "*"),
            "value",
        ),
    }
)
"""(kind, path, field) the OpenAPI lists as required but the API server decodes to a zero
value that its validation accepts: an omitted spec is an empty spec, an omitted pool
generation is 0, a device capacity or counter without a value is a quantity of 0 (``value``
is a ``resource.Quantity``, not a pointer: k8s.io/api resource/v1 types.go DeviceCapacity,
Counter).
The server, not the OpenAPI ``required`` list, decides. ``*`` stands for any index or key."""


@functools.cache
def _schema_root() -> FilePath:
    """The bundled schema folder, found without importing kubernetes-validate (whose
    package imports a JSON Schema library that would double a small run's time)."""
    spec = importlib.util.find_spec(_SCHEMA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"the {_SCHEMA_PACKAGE} package is not installed")
    return FilePath(next(iter(spec.submodule_search_locations))) / _SCHEMA_FOLDER


_FOLDER = re.compile(r"^v(\d+)\.(\d+)\.0-local-strict$")


@functools.cache
def schema_release(kubernetes_version: str) -> str:
    """The bundled schema release that checks ``kubernetes_version``: its own, else the
    newest older one."""
    wanted = tuple(int(p) for p in kubernetes_version.split("."))
    bundled = [
        (int(m[1]), int(m[2]))
        for m in (_FOLDER.match(p.name) for p in _schema_root().iterdir())
        if m is not None
    ]
    usable = [release for release in bundled if release <= wanted]
    if not usable:
        return kubernetes_version
    major, minor = max(usable)
    return f"{major}.{minor}"


def _schema_text(kubernetes_version: str, filename: str) -> str | None:
    folder = f"v{schema_release(kubernetes_version)}.0-local-strict"
    path = _schema_root() / folder / filename
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8")


@functools.cache
def _definitions(kubernetes_version: str) -> dict[str, Any]:
    text = _schema_text(kubernetes_version, "_definitions.json")
    if text is None:
        raise LookupError(f"no bundled schemas for Kubernetes {kubernetes_version}")
    definitions: dict[str, Any] = json.loads(text)["$defs"]
    return definitions


@functools.cache
def validator_for(kubernetes_version: str, api_version: str, kind: str) -> Validator | None:
    """The strict validator for one kind, or None if that release has no such schema."""
    stem = _GROUP_SUFFIX.sub(r"\1-", api_version if "/" in api_version else f"/{api_version}")
    text = _schema_text(kubernetes_version, f"{kind.lower()}-{stem.lstrip('-')}.json")
    if text is None:
        return None
    schema = json.loads(text)
    group, _, version = api_version.rpartition("/")
    declared = schema.get("x-kubernetes-group-version-kind", [])
    if not any(
        g.get("group", "") == group and g.get("version") == version and g.get("kind") == kind
        for g in declared
    ):
        return None
    return Validator(schema, definitions=_definitions(kubernetes_version))


@functools.cache
def _group_versions(kubernetes_version: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """group -> kind -> the versions of that group serving the kind, from the release's
    definitions (the core group is "")."""
    found: dict[str, dict[str, list[str]]] = {}
    for definition in _definitions(kubernetes_version).values():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            kinds = found.setdefault(str(gvk.get("group", "")), {})
            versions = kinds.setdefault(str(gvk.get("kind", "")), [])
            if gvk.get("version") not in versions:
                versions.append(str(gvk.get("version")))
    return {g: {k: tuple(v) for k, v in kinds.items()} for g, kinds in found.items()}


def built_in_group(kubernetes_version: str, group: str) -> bool:
    """Whether ``group`` is one of the release's built-in API groups."""
    return group in _group_versions(kubernetes_version)


def kinds(kubernetes_version: str, group: str) -> tuple[str, ...]:
    """The kinds a built-in ``group`` has in the release."""
    return tuple(_group_versions(kubernetes_version).get(group, {}))


def served_versions(kubernetes_version: str, group: str, kind: str) -> tuple[str, ...]:
    """The versions of a built-in ``group`` that have ``kind`` (none: no such kind)."""
    return _group_versions(kubernetes_version).get(group, {}).get(kind, ())


def dotted(path: Path) -> str:
    """``spec.devices.requests[0].name``."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out or "(document)"


def schema_findings(
    validator: Validator, data: dict[str, Any], *, api_version: str
) -> list[Finding]:
    findings: list[Finding] = []
    kind = str(data.get("kind", ""))
    for error in validator.iter_errors(data):
        if error.validator == "required" and _zero_value_accepted(kind, error):
            continue
        findings.extend(_findings(error, api_version=api_version))
    return findings


def _zero_value_accepted(kind: str, error: SchemaError) -> bool:
    missing = error.message.split('"')[1] if error.message.count('"') >= 2 else ""
    path: Path = error.path
    return any(
        kind == known_kind
        and missing == field
        and len(path) == len(pattern)
        and all(p == "*" or p == step for p, step in zip(pattern, path, strict=True))
        for known_kind, pattern, field in _ZERO_VALUE_ACCEPTED
    )


def _findings(error: SchemaError, *, api_version: str) -> Iterator[Finding]:
    path: Path = error.path
    version = api_version.rpartition("/")[2]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        for key in error.instance:
            if key in known:
                continue
            hint = _OTHER_SHAPE_HINTS.get((version, key))
            message = f"{dotted((*path, key))}: unknown field {key!r} in {api_version}"
            yield Finding(
                RULE, (*path, key), f"{message} ({hint})" if hint else message, Anchor.KEY
            )
        return
    if error.validator == "required":
        missing = error.message.split('"')[1] if error.message.count('"') >= 2 else ""
        where = (*path, missing) if missing else path
        yield Finding(RULE, where, f"{dotted(path)}: {error.message}", Anchor.KEY)
        return
    if error.validator == "oneOf":
        message = f"{structure.shown(error.instance)} must be a string or a number"
    else:
        message = error.message
    yield Finding(RULE, path, f"{dotted(path)}: {message}")
