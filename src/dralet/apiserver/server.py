"""An in-process Kubernetes API server stand-in for the DRA kinds, on aiohttp.

Serves ResourceClaim (with its ``status`` subresource), ResourceClaimTemplate,
ResourceSlice, DeviceClass (resource.k8s.io) and Node (core v1) over HTTP on 127.0.0.1
with the semantics drivers depend on: a global monotonic resourceVersion, uid,
creationTimestamp, generation, generateName; 409 AlreadyExists and 409 Conflict on a
stale resourceVersion; merge, JSON, strategic-merge (as merge) and server-side-apply
(as merge) patches; finalizers and deletionTimestamp; label and field selectors; watch
from a resourceVersion with 410 Gone after ``compact()``; deletecollection; discovery
for the configured Kubernetes version ("1.32" serves v1beta1 only; "1.34" serves v1,
v1beta2 and v1beta1). Every written object is checked against kubernetes-validate's
strict schema for that Kubernetes version and kind (plus the device rules of
``dralet.kube.slices``) and refused with 422 Invalid. Errors are ``kind: Status`` bodies
with ``Content-Type: application/json`` exactly.

Objects are stored once, in v1 shape, and converted on the way in and out
(``dralet.kube.shapes``). ``ApiServer`` runs in the caller's event loop (tests);
``ApiServerThread`` runs one in a background thread, and ``python -m
dralet.testing.apiserver`` in its own process (the CLI demo).
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import contextlib
import copy
import dataclasses
import datetime
import json
import logging
import secrets
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
import referencing
import referencing.jsonschema
import yaml
from aiohttp import web
from kubernetes_validate import utils as schema_files

from dralet.kube import shapes, slices

__all__ = [
    "ApiServer",
    "ApiServerSettings",
    "ApiServerThread",
    "ApiStatusError",
    "WriteRecord",
    "served_versions",
]

log = logging.getLogger(__name__)

JSONObject = dict[str, Any]
T = TypeVar("T")

RESOURCE_GROUP = "resource.k8s.io"
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GENERATE_SUFFIX_LENGTH = 5
_JSON = "application/json"
_MAX_DEVICES = slices.MAX_DEVICES_PER_SLICE
_FIRST_VERSION_WITH_V1BETA2 = (1, 33)
_FIRST_VERSION_WITH_V1 = (1, 34)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class ApiServerSettings:
    """How the stand-in behaves."""

    kubernetes_version: str = "1.34"
    """Kubernetes minor version to play ("1.32" … "1.37"): served versions and schemas."""
    host: str = "127.0.0.1"
    """Address to listen on; only loopback is sensible."""
    port: int = 0
    """TCP port; 0 picks a free one."""
    validate: bool = True
    """Check every written object against the strict schema of its version."""
    watch_timeout_default: float = 1800.0
    """Seconds a watch without ``timeoutSeconds`` stays open."""
    shutdown_timeout: float = 2.0
    """Seconds ``stop()`` waits for open requests to finish."""


class ApiStatusError(Exception):
    """A request the stand-in refuses; becomes a ``kind: Status`` answer."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def status(self) -> JSONObject:
        body: JSONObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


@dataclass(frozen=True)
class WriteRecord:
    """One accepted write, as the client sent it (after patching), for tests to inspect."""

    verb: str
    """create, update, patch, apply, delete."""
    kind: str
    api_version: str
    """The version the write was made in."""
    namespace: str
    name: str
    object: Mapping[str, Any]
    """The written object in the version it was written in."""
    field_manager: str = ""


@dataclass
class _InjectedFailure:
    code: int
    reason: str
    times: int
    method: str | None
    path_contains: str
    retry_after: float | None


@dataclass(frozen=True)
class _Kind:
    kind: str
    plural: str
    singular: str
    group: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    reset_status_on_create: bool = False
    field_labels: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})


_KINDS = (
    _Kind(
        "ResourceClaim",
        "resourceclaims",
        "resourceclaim",
        RESOURCE_GROUP,
        namespaced=True,
        status_subresource=True,
        reset_status_on_create=True,
    ),
    _Kind(
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        RESOURCE_GROUP,
        namespaced=True,
    ),
    _Kind(
        "ResourceSlice",
        "resourceslices",
        "resourceslice",
        RESOURCE_GROUP,
        namespaced=False,
        field_labels=frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
    ),
    _Kind("DeviceClass", "deviceclasses", "deviceclass", RESOURCE_GROUP, namespaced=False),
    _Kind(
        "Node",
        "nodes",
        "node",
        "",
        namespaced=False,
        short_names=("no",),
        status_subresource=True,
        field_labels=frozenset({"metadata.name", "spec.unschedulable"}),
    ),
    _Kind(
        "Event",
        "events",
        "event",
        "",
        namespaced=True,
        short_names=("ev",),
        field_labels=frozenset(
            {
                "metadata.name",
                "metadata.namespace",
                "involvedObject.kind",
                "involvedObject.name",
                "reason",
                "type",
            }
        ),
    ),
)
_BY_PLURAL = {k.plural: k for k in _KINDS}
_BY_KIND = {k.kind: k for k in _KINDS}


def served_versions(kubernetes_version: str) -> tuple[str, ...]:
    """resource.k8s.io versions a Kubernetes minor version serves, newest first."""
    minor = _minor(kubernetes_version)
    if minor >= _FIRST_VERSION_WITH_V1:
        return ("v1", "v1beta2", "v1beta1")
    if minor >= _FIRST_VERSION_WITH_V1BETA2:
        return ("v1beta2", "v1beta1")
    return ("v1beta1",)


def _minor(kubernetes_version: str) -> tuple[int, int]:
    major, minor = kubernetes_version.removeprefix("v").split(".")[:2]
    return int(major), int(minor)


# -- schema validation ------------------------------------------------------------------


@cache
def _validator(schema_dir: str, kind: str, api_version: str) -> jsonschema.Draft202012Validator:
    """One reusable strict-schema validator per Kubernetes version, kind and apiVersion."""
    group_version = api_version.replace(f"{RESOURCE_GROUP}/", "resource-")
    base = f"kubernetes-json-schema/{schema_dir}"
    schema = schema_files.schema_contents(f"{base}/{kind.lower()}-{group_version}.json", schema_dir)
    definitions = schema_files.schema_contents(f"{base}/_definitions.json", schema_dir)
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        [
            (schema["$id"], referencing.Resource.from_contents(schema)),
            (definitions["$id"], referencing.Resource.from_contents(definitions)),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_errors(obj: Mapping[str, Any], *, kubernetes_version: str) -> list[str]:
    """Every strict-schema error of ``obj`` (in its own apiVersion) for that version."""
    major, minor = _minor(kubernetes_version)
    schema_dir = f"v{major}.{minor}.0-local-strict"
    try:
        validator = _validator(schema_dir, str(obj.get("kind")), str(obj.get("apiVersion")))
    except FileNotFoundError:
        return [f"no schema for {obj.get('kind')} {obj.get('apiVersion')} in {kubernetes_version}"]
    found = []
    for error in validator.iter_errors(obj):
        where = ".".join(str(p) for p in error.absolute_path) or "<root>"
        found.append(f"{where}: {error.message}")
    return found


def _semantic_errors(kind: _Kind, obj: Mapping[str, Any]) -> list[str]:
    """The Go validation rules dralet relies on that schemas cannot express."""
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
            problems += [f"spec.devices: {p}" for p in slices.device_problems(device)]
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
        for request in (spec.get("devices") or {}).get("requests") or []:
            mode = (request.get("exactly") or {}).get("allocationMode")
            if mode not in (None, "ExactCount", "All"):
                problems.append(
                    f"spec.devices.requests[{request.get('name')}].allocationMode: Unsupported "
                    f'value: "{mode}": supported values: "All", "ExactCount"'
                )
    return problems


# -- selectors ------------------------------------------------------------------------


def _split_selector(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


@dataclass(frozen=True)
class _Requirement:
    """One term of a label or field selector."""

    key: str
    operator: str
    """``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!exists``."""
    values: frozenset[str] = frozenset()

    def matches(self, value: str | None) -> bool:
        if self.operator == "exists":
            return value is not None
        if self.operator == "!exists":
            return value is None
        if self.operator in ("=", "in"):
            return value in self.values
        return value not in self.values


def _parse_label_selector(selector: str) -> list[_Requirement]:
    requirements = []
    for term in _split_selector(selector):
        words = term.split(None, 2)
        if len(words) == len(("key", "op", "values")) and words[1] in ("in", "notin"):
            values = frozenset(v.strip() for v in words[2].strip("()").split(","))
            requirements.append(_Requirement(words[0], words[1], values))
        elif "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            requirements.append(_Requirement(key, "!=", frozenset({value})))
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            requirements.append(_Requirement(key, "=", frozenset({value})))
        elif term.startswith("!"):
            requirements.append(_Requirement(term[1:].strip(), "!exists"))
        else:
            requirements.append(_Requirement(term, "exists"))
    return requirements


def _parse_field_selector(kind: _Kind, selector: str) -> list[_Requirement]:
    requirements = []
    for term in _split_selector(selector):
        operator = "!=" if "!=" in term else "="
        key, value = (p.strip() for p in term.replace("==", "=").split(operator, 1))
        if key not in kind.field_labels:
            raise ApiStatusError(400, "BadRequest", f"field label not supported: {key}")
        requirements.append(_Requirement(key, operator, frozenset({value})))
    return requirements


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# -- patches --------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes, lists replace)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiStatusError(422, "Invalid", f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def json_patch(document: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    doc = copy.deepcopy(document)
    for op in operations:
        try:
            kind = op["op"]
            parts = _pointer(str(op["path"]))
            if kind in ("move", "copy"):
                source = _pointer(str(op["from"]))
                value = copy.deepcopy(_container(doc, source))
                if kind == "move":
                    doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
                doc = json_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
                continue
            if kind == "test":
                if _container(doc, parts) != op.get("value"):
                    raise ApiStatusError(422, "Invalid", f"test operation failed at {op['path']}")
                continue
            if not parts:
                doc = copy.deepcopy(op.get("value"))
                continue
            parent = _container(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "replace":
                index: Any = int(last) if isinstance(parent, list) else last
                if not isinstance(parent, list) and last not in parent:
                    raise KeyError(last)
                parent[index] = copy.deepcopy(op.get("value"))
            else:
                raise ApiStatusError(422, "Invalid", f"unknown JSON patch operation {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiStatusError(
                422, "Invalid", f"JSON patch {op!r} cannot be applied: {error!r}"
            ) from error
    return doc


# -- the store ------------------------------------------------------------------------


@dataclass(eq=False)
class _Watcher:
    kind: _Kind
    namespace: str | None
    matches: Callable[[Mapping[str, Any]], bool]
    queue: asyncio.Queue[tuple[str, JSONObject] | None] = field(default_factory=asyncio.Queue)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_bool(value: str | None, *, name: str) -> bool:
    if value is None or value == "":
        return False
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise ApiStatusError(400, "BadRequest", f"invalid boolean for {name}: {value!r}")


class ApiServer:
    """The stand-in. ``async with ApiServer(...) as server`` or ``await start()``/``stop()``.

    The store helpers (``create``, ``get``, ``patch``, ``delete``, ``list``, ``compact``)
    act on the store directly, without HTTP; call them from the server's event loop.
    """

    def __init__(self, settings: ApiServerSettings | None = None, **overrides: Any) -> None:
        base = settings or ApiServerSettings()
        self.settings = dataclasses.replace(base, **overrides)
        self.versions = served_versions(self.settings.kubernetes_version)
        self.preferred_version = self.versions[0]
        self.writes: builtins.list[WriteRecord] = []
        self._objects: dict[tuple[str, str, str], JSONObject] = {}
        self._resource_version = 0
        self._log: builtins.list[tuple[int, str, _Kind, JSONObject]] = []
        self._compacted = 0
        self._watchers: set[_Watcher] = set()
        self._runner: web.AppRunner | None = None
        self._failures: builtins.list[_InjectedFailure] = []
        self.url = ""

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> str:
        """Listen on 127.0.0.1; the base URL (``http://127.0.0.1:<port>``)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, shutdown_timeout=self.settings.shutdown_timeout, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        """End every watch, then stop listening."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """A kubeconfig file pointing at this stand-in (for kubectl and driver processes)."""
        return write_kubeconfig(path, url=self.url, namespace=namespace)

    # -- store helpers (no HTTP) --------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> JSONObject:
        """Create ``obj`` (in any served version); the stored object in that version."""
        kind, version = self._kind_of(obj)
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return self._create(kind, version, ns if kind.namespaced else None, obj, manager="")

    def get(
        self, kind: str, name: str, *, namespace: str | None = None, version: str | None = None
    ) -> JSONObject | None:
        """The object in ``version`` (default: newest served), or None."""
        kind_ = _BY_KIND[kind]
        stored = self._objects.get((kind_.plural, namespace or "", name))
        return None if stored is None else self._out(kind_, stored, version)

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        version: str | None = None,
    ) -> builtins.list[JSONObject]:
        kind_ = _BY_KIND[kind]
        matches = self._matcher(kind_, label_selector, field_selector)
        return [
            self._out(kind_, obj, version) for obj in self._select(kind_, namespace) if matches(obj)
        ]

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
        version: str | None = None,
    ) -> JSONObject:
        """Merge-patch an object (``subresource="status"`` to play the scheduler)."""
        kind_ = _BY_KIND[kind]
        return self._patch(
            kind_,
            version or self.preferred_version,
            namespace,
            name,
            subresource,
            lambda current: merge_patch(current, patch),
            verb="patch",
            manager="",
        )

    def delete(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject:
        kind_ = _BY_KIND[kind]
        return self._delete(kind_, self._version_for(kind_), namespace, name, {})

    def compact(self) -> int:
        """Forget all history (as etcd compaction does) and end every watch, so watches
        resumed from an older resourceVersion get 410 Gone; the compacted revision."""
        self._compacted = self._resource_version
        self._log.clear()
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        return self._compacted

    def inject_failure(
        self,
        code: int,
        *,
        reason: str = "ServiceUnavailable",
        times: int = 1,
        method: str | None = None,
        path_contains: str = "",
        retry_after: float | None = None,
    ) -> None:
        """Answer the next ``times`` matching HTTP requests with ``code`` (and a
        ``Retry-After`` header when given), as an overloaded server would."""
        self._failures.append(
            _InjectedFailure(code, reason, times, method, path_contains, retry_after)
        )

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        return self._resource_version

    def writes_of(
        self, kind: str, *, field_manager: str | None = None
    ) -> builtins.list[WriteRecord]:
        """The accepted writes of one kind, oldest first."""
        return [
            w
            for w in self.writes
            if w.kind == kind and (field_manager is None or w.field_manager == field_manager)
        ]

    # -- internals: versions and conversion ----------------------------------------------

    def _kind_of(self, obj: Mapping[str, Any]) -> tuple[_Kind, str]:
        kind = _BY_KIND.get(str(obj.get("kind")))
        if kind is None:
            raise ApiStatusError(400, "BadRequest", f"kind {obj.get('kind')!r} is not served")
        api_version = str(obj.get("apiVersion") or "")
        version = api_version.rpartition("/")[2]
        if kind.group and (
            not api_version.startswith(f"{kind.group}/") or version not in self.versions
        ):
            raise ApiStatusError(
                400, "BadRequest", f"apiVersion {api_version!r} is not served for {kind.kind}"
            )
        return kind, version

    def _version_for(self, kind: _Kind) -> str:
        return self.preferred_version if kind.group else "v1"

    def _api_version(self, kind: _Kind, version: str) -> str:
        return f"{kind.group}/{version}" if kind.group else version

    def _out(self, kind: _Kind, stored: Mapping[str, Any], version: str | None) -> JSONObject:
        if not kind.group:
            return copy.deepcopy(dict(stored))
        return shapes.to_version(stored, version or self.preferred_version)

    def _in(self, kind: _Kind, obj: Mapping[str, Any], version: str) -> JSONObject:
        if not kind.group:
            return copy.deepcopy(dict(obj))
        return shapes.from_version(obj, version)

    def _select(self, kind: _Kind, namespace: str | None) -> builtins.list[JSONObject]:
        return [
            obj
            for (plural, ns, _name), obj in sorted(self._objects.items())
            if plural == kind.plural and (namespace is None or ns == namespace)
        ]

    def _matcher(
        self, kind: _Kind, label_selector: str, field_selector: str
    ) -> Callable[[Mapping[str, Any]], bool]:
        labels = _parse_label_selector(label_selector)
        fields = _parse_field_selector(kind, field_selector)

        def matches(obj: Mapping[str, Any]) -> bool:
            meta_labels = (obj.get("metadata") or {}).get("labels") or {}
            return all(r.matches(meta_labels.get(r.key)) for r in labels) and all(
                r.matches(_field_value(obj, r.key)) for r in fields
            )

        return matches

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _emit(self, event: str, kind: _Kind, stored: JSONObject) -> None:
        snapshot = copy.deepcopy(stored)
        self._log.append((self._resource_version, event, kind, snapshot))
        for watcher in list(self._watchers):
            if watcher.kind is kind:
                watcher.queue.put_nowait((event, snapshot))

    def _not_found(self, kind: _Kind, name: str) -> ApiStatusError:
        return ApiStatusError(
            404,
            "NotFound",
            f'{self._resource_name(kind)} "{name}" not found',
            details={"name": name, "group": kind.group, "kind": kind.plural},
        )

    def _conflict(self, kind: _Kind, name: str, why: str) -> ApiStatusError:
        return ApiStatusError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {self._resource_name(kind)} "{name}": {why}',
            details={"name": name, "group": kind.group, "kind": kind.plural},
        )

    @staticmethod
    def _resource_name(kind: _Kind) -> str:
        return f"{kind.plural}.{kind.group}" if kind.group else kind.plural

    def _check(
        self,
        kind: _Kind,
        version: str,
        obj: Mapping[str, Any],
        *,
        sent: Mapping[str, Any] | None = None,
    ) -> None:
        """Refuse ``obj`` (canonical) unless valid in ``version``, as a 422 Invalid.

        ``sent`` is the body as the client wrote it (in ``version``): its fields other than
        metadata and status are checked as sent, so a body in another version's shape is
        refused rather than quietly converted.
        """
        if not self.settings.validate:
            return
        as_written = self._out(kind, obj, version)
        if sent is not None:
            for key in set(as_written) | set(sent):
                if key in ("metadata", "status", "apiVersion", "kind"):
                    continue
                if key in sent:
                    as_written[key] = sent[key]
                else:
                    as_written.pop(key, None)
        problems = schema_errors(as_written, kubernetes_version=self.settings.kubernetes_version)
        if not problems:  # like the real server: decode (schema) first, then validate
            problems = _semantic_errors(kind, obj)
        if problems:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise ApiStatusError(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: ' + "; ".join(problems),
                details={
                    "name": name,
                    "group": kind.group,
                    "kind": kind.kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": p} for p in problems],
                },
            )

    def _record(
        self, verb: str, kind: _Kind, version: str, stored: Mapping[str, Any], manager: str
    ) -> None:
        metadata = stored.get("metadata") or {}
        self.writes.append(
            WriteRecord(
                verb=verb,
                kind=kind.kind,
                api_version=self._api_version(kind, version),
                namespace=str(metadata.get("namespace") or ""),
                name=str(metadata.get("name") or ""),
                object=self._out(kind, stored, version),
                field_manager=manager,
            )
        )

    # -- internals: verbs --------------------------------------------------------------

    def _create(
        self,
        kind: _Kind,
        version: str,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        manager: str,
        dry_run: bool = False,
        verb: str = "create",
    ) -> JSONObject:
        if body.get("kind") not in (None, kind.kind) or body.get("apiVersion") not in (
            None,
            self._api_version(kind, version),
        ):
            raise ApiStatusError(
                400,
                "BadRequest",
                f"the body is a {body.get('apiVersion')} {body.get('kind')}, "
                f"not a {self._api_version(kind, version)} {kind.kind}",
            )
        obj = self._in(
            kind,
            {**body, "kind": kind.kind, "apiVersion": self._api_version(kind, version)},
            version,
        )
        metadata = dict(obj.get("metadata") or {})
        if kind.namespaced:
            if not namespace:
                raise ApiStatusError(400, "BadRequest", "the namespace of the object is required")
            if metadata.get("namespace") not in (None, namespace):
                raise ApiStatusError(
                    400, "BadRequest", "the namespace of the object does not match the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        if not metadata.get("name"):
            prefix = metadata.get("generateName")
            if not prefix:
                raise ApiStatusError(
                    422, "Invalid", f"{kind.kind}: metadata.name or generateName is required"
                )
            suffix = "".join(
                secrets.choice(_GENERATE_ALPHABET) for _ in range(_GENERATE_SUFFIX_LENGTH)
            )
            metadata["name"] = f"{prefix}{suffix}"
        name = str(metadata["name"])
        key = (kind.plural, namespace or "" if kind.namespaced else "", name)
        if key in self._objects:
            raise ApiStatusError(
                409,
                "AlreadyExists",
                f'{self._resource_name(kind)} "{name}" already exists',
                details={"name": name, "group": kind.group, "kind": kind.plural},
            )
        for server_field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            metadata.pop(server_field, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = _now()
        metadata["generation"] = 1
        obj["metadata"] = metadata
        if kind.reset_status_on_create:
            obj.pop("status", None)
        self._check(kind, version, obj, sent=body)
        if dry_run:
            return self._out(kind, obj, version)
        metadata["resourceVersion"] = self._next_version()
        self._objects[key] = obj
        self._record(verb, kind, version, obj, manager)
        self._emit("ADDED", kind, obj)
        return self._out(kind, obj, version)

    def _current(self, kind: _Kind, namespace: str | None, name: str) -> JSONObject:
        stored = self._objects.get((kind.plural, namespace or "", name))
        if stored is None:
            raise self._not_found(kind, name)
        return stored

    def _patch(
        self,
        kind: _Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
        change: Callable[[JSONObject], Any],
        *,
        verb: str,
        manager: str,
        dry_run: bool = False,
    ) -> JSONObject:
        """Apply ``change`` to the object as served in ``version`` and store the result."""
        current = self._current(kind, namespace, name)
        served = self._out(kind, current, version)
        changed = change(served)
        if not isinstance(changed, dict):
            raise ApiStatusError(422, "Invalid", "the patched object is not a JSON object")
        return self._update(
            kind,
            version,
            current,
            changed,
            subresource,
            verb=verb,
            manager=manager,
            dry_run=dry_run,
        )

    def _update(
        self,
        kind: _Kind,
        version: str,
        current: JSONObject,
        body: Mapping[str, Any],
        subresource: str,
        *,
        verb: str,
        manager: str,
        dry_run: bool = False,
    ) -> JSONObject:
        old_meta = current["metadata"]
        name = str(old_meta["name"])
        new = self._in(
            kind,
            {**body, "kind": kind.kind, "apiVersion": self._api_version(kind, version)},
            version,
        )
        sent = new.get("metadata") or {}
        sent_rv = sent.get("resourceVersion")
        if sent_rv not in (None, "") and str(sent_rv) != old_meta["resourceVersion"]:
            raise self._conflict(
                kind,
                name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        if sent.get("uid") not in (None, "", old_meta["uid"]):
            raise self._conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {sent.get('uid')}, "
                f"UID in object meta: {old_meta['uid']}",
            )
        if sent.get("name") not in (None, name):
            raise ApiStatusError(400, "BadRequest", "the name of the object does not match the URL")
        if subresource == "status":
            result = copy.deepcopy(current)
            if new.get("status") is None:
                result.pop("status", None)
            else:
                result["status"] = new["status"]
        else:
            result = new
            if kind.status_subresource and "status" in current:
                result["status"] = copy.deepcopy(current["status"])
            elif kind.status_subresource:
                result.pop("status", None)
            metadata = dict(sent)
            for kept in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
                "generation",
            ):
                if kept in old_meta:
                    metadata[kept] = old_meta[kept]
                else:
                    metadata.pop(kept, None)
            result["metadata"] = metadata
            new_finalizers = set(metadata.get("finalizers") or [])
            if old_meta.get("deletionTimestamp") and new_finalizers - set(
                old_meta.get("finalizers") or []
            ):
                raise ApiStatusError(
                    422,
                    "Invalid",
                    f'{kind.kind} "{name}" is invalid: metadata.finalizers: Forbidden: no new '
                    "finalizers can be added if the object is being deleted",
                )
            if kind.kind == "ResourceClaim" and result.get("spec") != current.get("spec"):
                raise ApiStatusError(
                    422, "Invalid", f'ResourceClaim "{name}" is invalid: spec: field is immutable'
                )
            if result.get("spec") != current.get("spec"):
                metadata["generation"] = int(old_meta.get("generation") or 1) + 1
        result["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if result == current:
            return self._out(kind, current, version)  # a no-op write changes nothing
        self._check(kind, version, result, sent=None if subresource else body)
        if dry_run:
            return self._out(kind, result, version)
        result["metadata"]["resourceVersion"] = self._next_version()
        key = (kind.plural, str(old_meta.get("namespace") or ""), name)
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            del self._objects[key]
            self._record(verb, kind, version, result, manager)
            self._emit("DELETED", kind, result)
            return self._out(kind, result, version)
        self._objects[key] = result
        self._record(verb, kind, version, result, manager)
        self._emit("MODIFIED", kind, result)
        return self._out(kind, result, version)

    def _delete(
        self,
        kind: _Kind,
        version: str,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any],
        *,
        dry_run: bool = False,
    ) -> JSONObject:
        current = self._current(kind, namespace, name)
        meta = current["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") not in (None, meta["uid"]):
            raise self._conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {meta['uid']}",
            )
        if preconditions.get("resourceVersion") not in (None, meta["resourceVersion"]):
            raise self._conflict(
                kind,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        if dry_run:
            return self._out(kind, current, version)
        key = (kind.plural, str(meta.get("namespace") or ""), name)
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["resourceVersion"] = self._next_version()
                self._record("delete", kind, version, current, "")
                self._emit("MODIFIED", kind, current)
            return self._out(kind, current, version)
        del self._objects[key]
        meta["resourceVersion"] = self._next_version()
        self._record("delete", kind, version, current, "")
        self._emit("DELETED", kind, current)
        return self._out(kind, current, version)

    # -- HTTP ------------------------------------------------------------------------

    def _injected(self, request: web.Request) -> web.Response | None:
        for failure in self._failures:
            if failure.times <= 0:
                continue
            if failure.method not in (None, request.method):
                continue
            if failure.path_contains not in request.path_qs:
                continue
            failure.times -= 1
            response = _json_response(
                ApiStatusError(failure.code, failure.reason, "injected failure").status(),
                status=failure.code,
            )
            if failure.retry_after is not None:
                response.headers["Retry-After"] = f"{failure.retry_after:g}"
            return response
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        injected = self._injected(request)
        if injected is not None:
            return injected
        try:
            return await self._route(request)
        except ApiStatusError as error:
            return _json_response(error.status(), status=error.code)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a stand-in bug: answer like the server would
            log.exception("stand-in failed on %s %s", request.method, request.path)
            failure = ApiStatusError(500, "InternalError", f"stand-in error: {error!r}")
            return _json_response(failure.status(), status=500)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"], ["version", ""]):
            return _json_response(self._version_info())
        if parts == ["api"]:
            return _json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {
                            "clientCIDR": "0.0.0.0/0",
                            "serverAddress": self.url.removeprefix("http://"),
                        }
                    ],
                }
            )
        if parts == ["apis"]:
            return _json_response(
                {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group()]}
            )
        if parts == ["apis", RESOURCE_GROUP]:
            return _json_response({"kind": "APIGroup", "apiVersion": "v1", **self._group()})
        if parts == ["api", "v1"]:
            return _json_response(self._resource_list("", "v1"))
        if len(parts) == 3 and parts[:2] == ["apis", RESOURCE_GROUP]:
            if parts[2] not in self.versions:
                raise ApiStatusError(
                    404, "NotFound", "the server could not find the requested resource"
                )
            return _json_response(self._resource_list(RESOURCE_GROUP, parts[2]))
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[:2] == ["apis", RESOURCE_GROUP]:
            group, version, rest = RESOURCE_GROUP, parts[2], parts[3:]
            if version not in self.versions:
                raise ApiStatusError(
                    404, "NotFound", "the server could not find the requested resource"
                )
        else:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in _BY_PLURAL or _BY_PLURAL[rest[0]].group != group:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        kind = _BY_PLURAL[rest[0]]
        if not kind.namespaced and namespace is not None:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and (subresource != "status" or not kind.status_subresource):
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if name is None:
            return await self._collection(request, kind, version, namespace)
        if kind.namespaced and namespace is None:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return await self._item(request, kind, version, namespace, name, subresource)

    async def _collection(
        self, request: web.Request, kind: _Kind, version: str, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        dry_run = query.get("dryRun") == "All"
        if request.method == "GET":
            if _go_bool(query.get("watch"), name="watch"):
                return await self._watch(request, kind, version, namespace)
            items = self.list(
                kind.kind,
                namespace=namespace,
                label_selector=query.get("labelSelector", ""),
                field_selector=query.get("fieldSelector", ""),
                version=version,
            )
            for item in items:  # like the real server, list items carry no kind/apiVersion
                item.pop("kind", None)
                item.pop("apiVersion", None)
            return _json_response(
                {
                    "kind": f"{kind.kind}List",
                    "apiVersion": self._api_version(kind, version),
                    "metadata": {"resourceVersion": str(self._resource_version)},
                    "items": items,
                }
            )
        if request.method == "POST":
            body = await _read_json(request)
            created = self._create(
                kind,
                version,
                namespace,
                body,
                manager=query.get("fieldManager", ""),
                dry_run=dry_run,
            )
            return _json_response(created, status=201)
        if request.method == "DELETE":
            matches = self._matcher(
                kind, query.get("labelSelector", ""), query.get("fieldSelector", "")
            )
            deleted = []
            for obj in self._select(kind, namespace):
                if matches(obj):
                    meta = obj["metadata"]
                    deleted.append(
                        self._delete(
                            kind, version, meta.get("namespace"), meta["name"], {}, dry_run=dry_run
                        )
                    )
            return _json_response(
                {
                    "kind": f"{kind.kind}List",
                    "apiVersion": self._api_version(kind, version),
                    "metadata": {"resourceVersion": str(self._resource_version)},
                    "items": deleted,
                }
            )
        raise ApiStatusError(405, "MethodNotAllowed", f"{request.method} is not supported here")

    async def _item(
        self,
        request: web.Request,
        kind: _Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
    ) -> web.StreamResponse:
        query = request.query
        dry_run = query.get("dryRun") == "All"
        manager = query.get("fieldManager", "")
        if request.method == "GET":
            return _json_response(self._out(kind, self._current(kind, namespace, name), version))
        if request.method == "PUT":
            body = await _read_json(request)
            current = self._current(kind, namespace, name)
            return _json_response(
                self._update(
                    kind,
                    version,
                    current,
                    body,
                    subresource,
                    verb="update",
                    manager=manager,
                    dry_run=dry_run,
                )
            )
        if request.method == "PATCH":
            return await self._patch_request(
                request, kind, version, namespace, name, subresource, manager, dry_run=dry_run
            )
        if request.method == "DELETE" and not subresource:
            options = await _read_json(request) if request.can_read_body else {}
            return _json_response(
                self._delete(kind, version, namespace, name, options, dry_run=dry_run)
            )
        raise ApiStatusError(405, "MethodNotAllowed", f"{request.method} is not supported here")

    async def _patch_request(
        self,
        request: web.Request,
        kind: _Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
        manager: str,
        *,
        dry_run: bool,
    ) -> web.StreamResponse:
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        raw = await request.read()
        if content_type == "application/apply-patch+yaml":
            if not manager:
                raise ApiStatusError(
                    400, "BadRequest", "PATCH with apply requires a fieldManager query parameter"
                )
            try:
                applied = yaml.safe_load(raw) or {}
            except yaml.YAMLError as error:
                raise ApiStatusError(
                    400, "BadRequest", f"cannot parse apply body: {error}"
                ) from error
            if not isinstance(applied, dict):
                raise ApiStatusError(400, "BadRequest", "the apply body must be an object")
            if (kind.plural, namespace or "", name) not in self._objects:
                metadata = {**(applied.get("metadata") or {}), "name": name}
                return _json_response(
                    self._create(
                        kind,
                        version,
                        namespace,
                        {**applied, "metadata": metadata},
                        manager=manager,
                        dry_run=dry_run,
                        verb="apply",
                    ),
                    status=201,
                )
            return _json_response(
                self._patch(
                    kind,
                    version,
                    namespace,
                    name,
                    subresource,
                    lambda current: merge_patch(current, applied),
                    verb="apply",
                    manager=manager,
                    dry_run=dry_run,
                )
            )
        try:
            patch = json.loads(raw)
        except ValueError as error:
            raise ApiStatusError(400, "BadRequest", f"the patch is not JSON: {error}") from error
        change: Callable[[Any], Any]
        if content_type == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiStatusError(400, "BadRequest", "a JSON patch must be a list")
            change = lambda current: json_patch(current, patch)  # noqa: E731
        elif content_type in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            if not isinstance(patch, dict):
                raise ApiStatusError(400, "BadRequest", "a merge patch must be an object")
            change = lambda current: merge_patch(current, patch)  # noqa: E731
        else:
            raise ApiStatusError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        return _json_response(
            self._patch(
                kind,
                version,
                namespace,
                name,
                subresource,
                change,
                verb="patch",
                manager=manager,
                dry_run=dry_run,
            )
        )

    async def _watch(
        self, request: web.Request, kind: _Kind, version: str, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        matches = self._matcher(
            kind, query.get("labelSelector", ""), query.get("fieldSelector", "")
        )
        bookmarks = _go_bool(query.get("allowWatchBookmarks"), name="allowWatchBookmarks")
        timeout = float(query.get("timeoutSeconds") or self.settings.watch_timeout_default)
        since = query.get("resourceVersion", "")
        response = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if since not in ("", "0") and int(since) < self._compacted:
            gone = ApiStatusError(
                410, "Expired", f"too old resource version: {since} ({self._compacted})"
            ).status()
            gone["reason"] = "Expired"
            await _send_event(response, "ERROR", gone)
            await response.write_eof()
            return response
        watcher = _Watcher(kind, namespace, matches)
        # Register and replay in one step (no await between): no event can fall between.
        if since in ("", "0"):
            backlog = [("ADDED", obj) for obj in self._select(kind, namespace)]
        else:
            backlog = [(e, obj) for rv, e, k, obj in self._log if k is kind and rv > int(since)]
        for item in backlog:
            watcher.queue.put_nowait((item[0], copy.deepcopy(item[1])))
        self._watchers.add(watcher)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    item_ = await watcher.queue.get()
                    if item_ is None:
                        break
                    event, obj = item_
                    meta = obj.get("metadata") or {}
                    if namespace is not None and meta.get("namespace") != namespace:
                        continue
                    if not matches(obj):
                        continue
                    await _send_event(response, event, self._out(kind, obj, version))
        except TimeoutError:
            if bookmarks:
                await _send_event(
                    response,
                    "BOOKMARK",
                    {
                        "kind": kind.kind,
                        "apiVersion": self._api_version(kind, version),
                        "metadata": {"resourceVersion": str(self._resource_version)},
                    },
                )
        except (ConnectionResetError, RuntimeError):
            return response
        finally:
            self._watchers.discard(watcher)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    # -- discovery ----------------------------------------------------------------------

    def _version_info(self) -> JSONObject:
        major, minor = _minor(self.settings.kubernetes_version)
        return {
            "major": str(major),
            "minor": str(minor),
            "gitVersion": f"v{major}.{minor}.0",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _group(self) -> JSONObject:
        return {
            "name": RESOURCE_GROUP,
            "versions": [
                {"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v} for v in self.versions
            ],
            "preferredVersion": {
                "groupVersion": f"{RESOURCE_GROUP}/{self.preferred_version}",
                "version": self.preferred_version,
            },
        }

    def _resource_list(self, group: str, version: str) -> JSONObject:
        entries: builtins.list[JSONObject] = []
        for kind in _KINDS:
            if kind.group != group:
                continue
            entries.append(
                {
                    "name": kind.plural,
                    "singularName": kind.singular,
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": [
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch",
                    ],
                    **({"shortNames": list(kind.short_names)} if kind.short_names else {}),
                }
            )
            if kind.status_subresource:
                entries.append(
                    {
                        "name": f"{kind.plural}/status",
                        "singularName": "",
                        "namespaced": kind.namespaced,
                        "kind": kind.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }


def _json_response(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={"Content-Type": _JSON}
    )


async def _read_json(request: web.Request) -> JSONObject:
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ApiStatusError(400, "BadRequest", f"the body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
    return body


async def _send_event(response: web.StreamResponse, event: str, obj: Mapping[str, Any]) -> None:
    await response.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")


def write_kubeconfig(path: str | Path, *, url: str, namespace: str = "default") -> Path:
    """Write a kubeconfig whose current context points at ``url`` without credentials."""
    target = Path(path)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dralet-standin", "cluster": {"server": url}}],
        "users": [{"name": "dralet-standin", "user": {"token": "dralet-standin"}}],
        "contexts": [
            {
                "name": "dralet-standin",
                "context": {
                    "cluster": "dralet-standin",
                    "user": "dralet-standin",
                    "namespace": namespace,
                },
            }
        ],
        "current-context": "dralet-standin",
    }
    target.write_text(yaml.safe_dump(config))
    return target


# -- in a background thread -----------------------------------------------------------


class ApiServerThread:
    """An ``ApiServer`` on its own event loop in a daemon thread (sync callers, demos).

    ``start()`` returns the URL; the store helpers run on the server's loop and wait.
    """

    def __init__(self, settings: ApiServerSettings | None = None, **overrides: Any) -> None:
        self.server = ApiServer(settings, **overrides)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._failure: BaseException | None = None

    def __enter__(self) -> ApiServerThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="dralet-apiserver", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise RuntimeError("the API stand-in failed to start") from self._failure
        return self.server.url

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        try:
            await self.server.start()
        except Exception as error:
            self._failure = error
            self._ready.set()
            raise
        self._ready.set()
        try:
            await self._done.wait()
        finally:
            await self.server.stop()

    def stop(self) -> None:
        if self._loop is not None and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store helper of the server (e.g. ``server.patch``) on its loop."""
        if self._loop is None:
            raise RuntimeError("the API stand-in is not running")

        async def run() -> T:
            return function(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> JSONObject:
        return self.call(self.server.create, obj, namespace=namespace)

    def get(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject | None:
        return self.call(self.server.get, kind, name, namespace=namespace)

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JSONObject:
        return self.call(
            self.server.patch, kind, name, patch, namespace=namespace, subresource=subresource
        )

    def delete(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject:
        return self.call(self.server.delete, kind, name, namespace=namespace)

    def list(self, kind: str, **selectors: str) -> builtins.list[JSONObject]:
        return self.call(self.server.list, kind, **selectors)

    def compact(self) -> int:
        return self.call(self.server.compact)

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        return self.server.write_kubeconfig(path, namespace=namespace)


# -- as a process -----------------------------------------------------------------------


def _iter_objects(paths: Sequence[str]) -> Iterator[JSONObject]:
    for path in paths:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if isinstance(doc, dict):
                yield doc


async def _serve_forever(args: argparse.Namespace) -> None:
    server = ApiServer(kubernetes_version=args.kubernetes_version, port=args.port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        for obj in _iter_objects(args.objects):
            server.create(obj)
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        print(server.url, flush=True)
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dralet.testing.apiserver``: serve until SIGTERM; print the URL."""
    parser = argparse.ArgumentParser(description="dralet's Kubernetes API stand-in")
    parser.add_argument("--kubernetes-version", default=ApiServerSettings.kubernetes_version)
    parser.add_argument("--port", type=int, default=ApiServerSettings.port)
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("objects", nargs="*", help="YAML files of objects to create first")
    asyncio.run(_serve_forever(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
