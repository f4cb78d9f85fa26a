"""CDI spec values and their JSON form, with the minimum spec version they need.

Pure: building, serializing and parsing specs does no I/O. ``to_json`` writes the lowest
``cdiVersion`` that the features used require, so older runtimes (whose CDI library
accepts only versions it knows) load the spec; ``from_json`` parses strictly, refusing
unknown fields the way the CDI library does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dralet.cdi import names

__all__ = [
    "CDIDevice",
    "CDISpecError",
    "ContainerEdits",
    "DeviceNode",
    "Hook",
    "Mount",
    "Spec",
    "from_json",
    "minimum_version",
    "to_json",
]

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
UINT32_MAX = 2**32 - 1


class CDISpecError(ValueError):
    """A spec is structurally invalid for the CDI library."""


@dataclass(frozen=True)
class DeviceNode:
    """A device node the container gets: ``path`` inside it, from ``host_path`` (default:
    the same path) on the host."""

    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Mount:
    """``host_path`` mounted at ``container_path`` (``type`` and ``options`` as for mount(8))."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""


@dataclass(frozen=True)
class Hook:
    """An OCI hook the runtime runs at ``hook_name`` (``createContainer``, say)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    """What a runtime changes in a container that gets the device."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        return not (
            self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
            additional_gids=self.additional_gids + other.additional_gids,
        )


@dataclass(frozen=True)
class CDIDevice:
    name: str
    container_edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    kind: str
    devices: tuple[CDIDevice, ...]
    container_edits: ContainerEdits = ContainerEdits()
    annotations: Mapping[str, str] = field(default_factory=dict)

    def qualified_names(self) -> list[str]:
        return [f"{self.kind}={device.name}" for device in self.devices]


@functools.lru_cache(maxsize=64)  # a handful of versions, compared on every spec written
def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _edits_minimum(edits: ContainerEdits) -> str:
    required = "0.3.0"
    if any(mount.type for mount in edits.mounts):
        required = "0.4.0"
    if any(node.host_path for node in edits.device_nodes):
        required = "0.5.0"
    if edits.additional_gids:
        required = "0.7.0"
    return required


def minimum_version(spec: Spec) -> str:
    """The lowest ``cdiVersion`` that supports every feature ``spec`` uses."""
    found = ["0.3.0", _edits_minimum(spec.container_edits)]
    for device in spec.devices:
        found.append(_edits_minimum(device.container_edits))
        if device.name[:1].isdigit():
            found.append("0.5.0")
        if device.annotations:
            found.append("0.6.0")
    if spec.annotations:
        found.append("0.6.0")
    if "." in spec.kind.partition("/")[2]:
        found.append("0.6.0")
    return max(found, key=_version_key)


def validate(spec: Spec) -> None:
    """Check what the CDI library checks when it loads a spec; raise ``CDISpecError``."""
    try:
        names.validate_kind(spec.kind)
        for device in spec.devices:
            names.validate_device_name(device.name)
    except names.CDINameError as exc:
        raise CDISpecError(str(exc)) from exc
    if not spec.devices:
        raise CDISpecError("invalid spec, no devices")
    seen: set[str] = set()
    for device in spec.devices:
        if device.name in seen:
            raise CDISpecError(f'invalid spec, multiple device "{device.name}"')
        seen.add(device.name)
        if device.container_edits.is_empty():
            raise CDISpecError(f"invalid device {device.name!r}, empty device edits")
        _validate_edits(device.container_edits)
    _validate_edits(spec.container_edits)


def _validate_edits(edits: ContainerEdits) -> None:
    for env in edits.env:
        if "=" not in env:
            raise CDISpecError(f"invalid environment variable {env!r}")
    for node in edits.device_nodes:
        if not node.path:
            raise CDISpecError("invalid (empty) device path")
        if node.permissions and set(node.permissions) - set("rwm"):
            raise CDISpecError(f"invalid permissions {node.permissions!r}")
        if node.type and node.type not in ("b", "c", "u", "p"):
            raise CDISpecError(f"invalid device type {node.type!r}")
        for value in (node.uid, node.gid):
            if value is not None and not 0 <= value <= UINT32_MAX:
                raise CDISpecError(f"invalid uid/gid {value}")
    for mount in edits.mounts:
        if not mount.host_path:
            raise CDISpecError("invalid mount, empty host path")
        if not mount.container_path:
            raise CDISpecError("invalid mount, empty container path")
    for hook in edits.hooks:
        if hook.hook_name not in HOOK_NAMES:
            raise CDISpecError(f"invalid hook name {hook.hook_name!r}")
        if not hook.path:
            raise CDISpecError("invalid hook, empty path")


def _node_json(node: DeviceNode) -> dict[str, Any]:
    out: dict[str, Any] = {"path": node.path}
    for key, value in (
        ("hostPath", node.host_path),
        ("type", node.type),
        ("major", node.major),
        ("minor", node.minor),
        ("fileMode", node.file_mode),
        ("permissions", node.permissions),
        ("uid", node.uid),
        ("gid", node.gid),
    ):
        if value not in ("", None):
            out[key] = value
    return out


def _edits_json(edits: ContainerEdits) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if edits.env:
        out["env"] = list(edits.env)
    if edits.device_nodes:
        out["deviceNodes"] = [_node_json(node) for node in edits.device_nodes]
    if edits.mounts:
        out["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                **({"options": list(m.options)} if m.options else {}),
                **({"type": m.type} if m.type else {}),
            }
            for m in edits.mounts
        ]
    if edits.hooks:
        out["hooks"] = [
            {
                "hookName": h.hook_name,
                "path": h.path,
                **({"args": list(h.args)} if h.args else {}),
                **({"env": list(h.env)} if h.env else {}),
                **({"timeout": h.timeout} if h.timeout is not None else {}),
            }
            for h in edits.hooks
        ]
    if edits.additional_gids:
        out["additionalGids"] = list(edits.additional_gids)
    return out


def to_json(spec: Spec) -> dict[str, Any]:
    """The spec as the CDI JSON document, validated, with its minimum ``cdiVersion``;
    ``from_json`` reads it back as the same spec (tests/cdi/test_spec_round_trip.py)."""
    validate(spec)
    document: dict[str, Any] = {"cdiVersion": minimum_version(spec), "kind": spec.kind}
    if spec.annotations:
        document["annotations"] = dict(spec.annotations)
    document["devices"] = [
        {
            "name": device.name,
            **({"annotations": dict(device.annotations)} if device.annotations else {}),
            "containerEdits": _edits_json(device.container_edits),
        }
        for device in spec.devices
    ]
    edits = _edits_json(spec.container_edits)
    if edits:
        document["containerEdits"] = edits
    return document


_SPEC_FIELDS = frozenset(("cdiVersion", "kind", "annotations", "devices", "containerEdits"))
_DEVICE_FIELDS = frozenset(("name", "annotations", "containerEdits"))
_EDITS_FIELDS = frozenset(("env", "deviceNodes", "mounts", "hooks", "additionalGids"))
_NODE_FIELDS = frozenset(
    ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")
)
_MOUNT_FIELDS = frozenset(("hostPath", "containerPath", "options", "type"))
_HOOK_FIELDS = frozenset(("hookName", "path", "args", "env", "timeout"))


def _take(obj: Mapping[str, Any], allowed: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise CDISpecError(f"{where}: expected an object")
    if not obj.keys() <= allowed:
        raise CDISpecError(f"{where}: unknown field {sorted(set(obj) - allowed)[0]!r}")
    return obj


def _edits_from(obj: Mapping[str, Any] | None, where: str) -> ContainerEdits:
    if obj is None:
        return ContainerEdits()
    o = _take(obj, _EDITS_FIELDS, where)
    nodes = tuple(
        DeviceNode(
            path=n.get("path", ""),
            host_path=n.get("hostPath", ""),
            type=n.get("type", ""),
            major=n.get("major"),
            minor=n.get("minor"),
            file_mode=n.get("fileMode"),
            permissions=n.get("permissions", ""),
            uid=n.get("uid"),
            gid=n.get("gid"),
        )
        for n in (
            _take(x, _NODE_FIELDS, f"{where}.deviceNodes") for x in o.get("deviceNodes") or ()
        )
    )
    mounts = tuple(
        Mount(
            m.get("hostPath", ""),
            m.get("containerPath", ""),
            tuple(m.get("options") or ()),
            m.get("type", ""),
        )
        for m in (_take(x, _MOUNT_FIELDS, f"{where}.mounts") for x in o.get("mounts") or ())
    )
    hooks = tuple(
        Hook(
            h.get("hookName", ""),
            h.get("path", ""),
            tuple(h.get("args") or ()),
            tuple(h.get("env") or ()),
            h.get("timeout"),
        )
        for h in (_take(x, _HOOK_FIELDS, f"{where}.hooks") for x in o.get("hooks") or ())
    )
    return ContainerEdits(
        env=tuple(o.get("env") or ()),
        device_nodes=nodes,
        mounts=mounts,
        hooks=hooks,
        additional_gids=tuple(o.get("additionalGids") or ()),
    )


def from_json(document: Mapping[str, Any]) -> Spec:
    """Parse a CDI JSON document strictly (unknown fields and bad versions are errors)."""
    doc = _take(document, _SPEC_FIELDS, "spec")
    version = str(doc.get("cdiVersion", "")).removeprefix("v")
    if version not in KNOWN_VERSIONS:
        raise CDISpecError(f'invalid version "{version}"')
    devices = tuple(
        CDIDevice(
            name=d.get("name", ""),
            container_edits=_edits_from(
                d.get("containerEdits") or {}, f"devices[{i}].containerEdits"
            ),
            annotations=dict(d.get("annotations") or {}),
        )
        for i, d in enumerate(
            _take(x, _DEVICE_FIELDS, "devices[]") for x in doc.get("devices") or ()
        )
    )
    spec = Spec(
        kind=str(doc.get("kind", "")),
        devices=devices,
        container_edits=_edits_from(doc.get("containerEdits"), "containerEdits"),
        annotations=dict(doc.get("annotations") or {}),
    )
    validate(spec)
    if _version_key(minimum_version(spec)) > _version_key(version):
        raise CDISpecError(f"the spec version must be at least v{minimum_version(spec)}")
    return spec
