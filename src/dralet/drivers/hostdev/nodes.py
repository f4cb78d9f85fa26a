"""Finding the device nodes a configuration names: stat, udev, sysfs, stable names.

Nothing here writes: discovery reads ``/dev`` (or wherever the globs point), the
device's sysfs directory (``<sysfs>/dev/<char|block>/<major>:<minor>``) and udev's
database (``<udev data>/<c|b><major>:<minor>``, lines ``E:KEY=VALUE``).
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import logging
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import dralet
from dralet.drivers.hostdev.config import AttributeSource, Group, HostdevConfig

__all__ = ["DeviceNode", "Discovery", "FoundDevice", "discover", "stat_node"]

log = logging.getLogger(__name__)

NodeType = Literal["char", "block"]
_NOT_LABEL = re.compile(r"[^a-z0-9]+")
_HASH_LENGTH = 8
_SYSFS_READ_LIMIT = 4096
_TRUE = frozenset({"1", "true", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "no", "n", "off"})


@dataclass(frozen=True)
class DeviceNode:
    """One device node as the host has it."""

    path: str
    type: NodeType
    major: int
    minor: int
    mode: int
    """Permission bits (``0o660``, say)."""
    uid: int
    gid: int

    @property
    def number(self) -> str:
        return f"{self.major}:{self.minor}"

    @property
    def cdi_type(self) -> str:
        """The node type as CDI (and OCI) write it."""
        return "c" if self.type == "char" else "b"

    def identity(self) -> dict[str, object]:
        """What proves later that a path is still this device."""
        return {"path": self.path, "type": self.type, "major": self.major, "minor": self.minor}


def stat_node(path: str) -> DeviceNode | None:
    """The device node at ``path`` (links followed); None if it is not one."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode):
        kind: NodeType = "char"
    elif stat.S_ISBLK(info.st_mode):
        kind = "block"
    else:
        return None
    return DeviceNode(
        path=path,
        type=kind,
        major=os.major(info.st_rdev),
        minor=os.minor(info.st_rdev),
        mode=stat.S_IMODE(info.st_mode),
        uid=info.st_uid,
        gid=info.st_gid,
    )


@dataclass(frozen=True)
class FoundDevice:
    """A device node a group took, with the name and the values it is published with."""

    name: str
    base: str
    """The device's own name; ``name`` differs for the slots of a shared device."""
    group: Group
    node: DeviceNode
    attributes: Mapping[str, dralet.AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Discovery:
    """One scan: the devices found, and why any node was left out."""

    devices: Mapping[str, FoundDevice]
    problems: tuple[str, ...] = ()


class _Probe:
    """What one node's sysfs directory and udev entry say, read once each."""

    def __init__(self, config: HostdevConfig, node: DeviceNode) -> None:
        self.config = config
        self.node = node
        self._sysfs: Path | bool | None = False
        self._udev: dict[str, str] | None = None

    @property
    def sysfs(self) -> Path | None:
        if self._sysfs is False:
            link = self.config.sysfs_root / "dev" / self.node.type / self.node.number
            try:
                self._sysfs = link.resolve(strict=True)
            except OSError:
                self._sysfs = None
        assert self._sysfs is not True
        return self._sysfs

    def sysfs_value(self, relative: str) -> str | None:
        directory = self.sysfs
        if directory is None:
            return None
        try:
            with open(directory / relative, "rb") as handle:
                raw = handle.read(_SYSFS_READ_LIMIT)
        except OSError:
            return None
        return raw.decode("utf-8", "replace").strip()

    @property
    def udev(self) -> dict[str, str]:
        if self._udev is None:
            self._udev = _read_udev(self.config.udev_data_dir, self.node)
        return self._udev


def _read_udev(data_dir: Path, node: DeviceNode) -> dict[str, str]:
    entry = data_dir / f"{node.cdi_type}{node.number}"
    try:
        text = entry.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    properties: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("E:"):
            key, _, value = line[2:].partition("=")
            properties[key] = value
    return properties


def _matches(group: Group, probe: _Probe) -> bool:
    match = group.match
    if match.type is not None and match.type != probe.node.type:
        return False
    for key, pattern in match.udev.items():
        value = probe.udev.get(key)
        if value is None or not fnmatch.fnmatchcase(value, pattern):
            return False
    for relative, pattern in match.sysfs.items():
        value = probe.sysfs_value(relative)
        if value is None or not fnmatch.fnmatchcase(value, pattern):
            return False
    return True


def _label(text: str) -> str:
    return _NOT_LABEL.sub("-", text.lower()).strip("-")


def _device_name(group: str, stable_id: str) -> str:
    """``<group>-<id>`` as a DNS label; a long id keeps its tail and gains a hash of
    the whole, so two long ids that share a tail stay apart."""
    piece = _label(stable_id)
    room = dralet.DNS_LABEL_MAX_LENGTH - len(group) - 1
    if len(piece) > room:
        digest = hashlib.sha256(stable_id.encode()).hexdigest()[:_HASH_LENGTH]
        tail = piece[-(room - _HASH_LENGTH - 1) :].strip("-")
        piece = f"{tail}-{digest}" if tail else digest
    return f"{group}-{piece}"


def _stable_id(source: str, probe: _Probe) -> str:
    if source.startswith("udev:"):
        return probe.udev.get(source.removeprefix("udev:"), "")
    if source == "sysfs":
        directory = probe.sysfs
        if directory is None:
            return ""
        try:
            relative = directory.relative_to(probe.config.sysfs_root.resolve() / "devices")
        except ValueError:
            return directory.name
        # Virtual devices are named by the kernel alone (loop0, kvm, fuse); a physical
        # one by where it hangs (its bus path), which survives reboots.
        return relative.name if relative.parts[:1] == ("virtual",) else str(relative)
    return os.path.basename(probe.node.path)


def _value(spec: AttributeSource, probe: _Probe) -> str | None:
    if spec.udev is not None:
        return probe.udev.get(spec.udev)
    assert spec.sysfs is not None
    return probe.sysfs_value(spec.sysfs)


def _typed(raw: str, spec: AttributeSource) -> dralet.AttributeValue:
    if spec.type == "int":
        return int(raw, 0)
    if spec.type == "bool":
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"{raw!r} is not a boolean")
    if spec.type == "version":
        return dralet.Version(raw.removeprefix("v"))
    return raw


def _attributes(group: Group, probe: _Probe) -> tuple[dict[str, dralet.AttributeValue], list[str]]:
    node = probe.node
    values: dict[str, dralet.AttributeValue] = {
        "group": group.name,
        "type": node.type,
        "major": node.major,
        "minor": node.minor,
    }
    if len(node.path) <= dralet.ATTRIBUTE_VALUE_MAX_LENGTH:
        values["path"] = node.path
    problems: list[str] = []
    for name, spec in group.attributes.items():
        if not isinstance(spec, AttributeSource):
            values[name] = spec
            continue
        raw = _value(spec, probe)
        if raw is None:
            continue  # the device does not have it: left out, as a missing property
        try:
            values[name] = _typed(raw, spec)
        except ValueError as exc:
            problems.append(f"{node.path}: attribute {name}: {exc}")
    return values, problems


def _capacity(group: Group, probe: _Probe) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    problems: list[str] = []
    for name, spec in group.capacity.items():
        if not isinstance(spec, AttributeSource):
            values[name] = str(spec)
            continue
        raw = _value(spec, probe)
        if raw is None:
            continue
        try:
            values[name] = str(int(raw, 0) * spec.scale)
        except ValueError:
            problems.append(f"{probe.node.path}: capacity {name}: {raw!r} is not a number")
    return values, problems


def _candidates(group: Group) -> list[str]:
    paths: set[str] = set()
    for pattern in group.match.paths:
        paths.update(glob.glob(pattern))
    return sorted(paths)


def discover(config: HostdevConfig) -> Discovery:
    """Every device node the configuration takes, named, with its published values."""
    found: dict[str, FoundDevice] = {}
    problems: list[str] = []
    claimed: dict[str, str] = {}
    """Device number → the group that took it (a node matched twice goes to the first)."""
    for group in config.groups:
        named: dict[str, list[tuple[DeviceNode, _Probe]]] = {}
        for path in _candidates(group):
            node = stat_node(path)
            if node is None:
                continue
            probe = _Probe(config, node)
            if not _matches(group, probe):
                continue
            key = f"{node.type}:{node.number}"
            if key in claimed:
                if claimed[key] != group.name:
                    problems.append(
                        f"{path}: already taken by group {claimed[key]}; "
                        f"left out of group {group.name}"
                    )
                continue  # a second path (a link, say) to a node the group has
            claimed[key] = group.name
            stable = next((s for s in (_stable_id(src, probe) for src in group.naming) if s), "")
            if not stable:
                problems.append(f"{path}: no naming source of group {group.name} yields a name")
                continue
            named.setdefault(_device_name(group.name, stable), []).append((node, probe))
        for base, nodes in sorted(named.items()):
            if len(nodes) > 1:
                paths = ", ".join(n.path for n, _ in nodes)
                problems.append(
                    f"{paths}: all named {base}; left out (give group {group.name} a naming "
                    "source that tells them apart)"
                )
                continue
            node, probe = nodes[0]
            attributes, attribute_problems = _attributes(group, probe)
            capacity, capacity_problems = _capacity(group, probe)
            problems += attribute_problems + capacity_problems
            for name in _published_names(group, base):
                found[name] = FoundDevice(
                    name=name,
                    base=base,
                    group=group,
                    node=node,
                    attributes=attributes,
                    capacity=capacity,
                )
    return Discovery(devices=found, problems=tuple(problems))


def _published_names(group: Group, base: str) -> Sequence[str]:
    if group.share == 1 or group.sharing == "capacity":
        return (base,)
    width = dralet.DNS_LABEL_MAX_LENGTH - len(f"-s{group.share - 1}")
    return tuple(f"{base[:width].rstrip('-')}-s{i}" for i in range(group.share))
