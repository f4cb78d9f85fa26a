"""The hostdev driver's configuration file: groups of device nodes, validated with
pydantic, every error one line naming the file and line.

A group says which device nodes it takes (path globs, optionally narrowed by node type,
udev properties and sysfs attributes), how each is named (stable across reboots), how
many containers may share one, what the scheduler sees (attributes, capacity) and what
the container gets (the node at a path of its choice, mounts, environment)::

    groups:
      - name: loop
        match:
          paths: ["/dev/loop[0-9]*"]
          type: block
        share: 1
        attributes:
          kind: loop-device
        capacity:
          size: {sysfs: size, scale: 512}
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import dralet

__all__ = [
    "DEFAULT_NAMING",
    "AttributeSource",
    "ConfigError",
    "Group",
    "HostdevConfig",
    "Match",
    "MountSpec",
    "load_config",
]

DEFAULT_NAMING = ("udev:ID_PATH", "udev:ID_SERIAL", "sysfs", "path")
"""Where a device's stable name comes from, first that yields: the udev properties
that follow the physical port or the unit's serial number, then the device's sysfs
path, then the node's own file name. Never the order in which a glob matched."""

MAX_SHARE = 1024
GROUP_NAME_MAX_LENGTH = 24
"""Leaves room in a 63-character device name for the stable id."""
_NAMING = re.compile(r"(udev:[A-Za-z0-9_]+|sysfs|path)")
_PLACEHOLDERS = re.compile(r"\{([a-z]*)\}")
CONTAINER_PATH_PLACEHOLDERS = frozenset({"basename", "device", "index"})
"""``{basename}``: the host node's file name; ``{device}``: the published device name;
``{index}``: the device's position among the claim's devices of its group (0, 1, …).
A path without a placeholder is the first device's; the n-th after it gets ``-<n>``."""


class ConfigError(ValueError):
    """The configuration file is unusable; the message names the file and line."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class AttributeSource(_Model):
    """A value read from the device: a udev property or a sysfs attribute file (relative
    to the device's sysfs directory), converted to ``type``. For capacity, the number
    read is multiplied by ``scale`` (a sysfs ``size`` in 512-byte sectors: scale 512)."""

    udev: str | None = None
    sysfs: str | None = None
    type: Literal["string", "int", "bool", "version"] = "string"
    scale: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _one_source(self) -> AttributeSource:
        if (self.udev is None) == (self.sysfs is None):
            raise ValueError("give exactly one of udev or sysfs")
        if self.sysfs is not None:
            _check_relative(self.sysfs, what="sysfs")
        return self


AttributeValue = bool | int | str
AttributeSpec = AttributeValue | AttributeSource


class Match(_Model):
    """Which device nodes a group takes: every node a glob in ``paths`` matches that is
    of ``type`` (any, if unset) and whose udev properties and sysfs attributes match the
    given shell patterns."""

    paths: Annotated[list[str], Field(min_length=1)]
    type: Literal["char", "block"] | None = None
    udev: dict[str, str] = Field(default_factory=dict)
    sysfs: dict[str, str] = Field(default_factory=dict)

    @field_validator("paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for pattern in paths:
            if not pattern.startswith("/"):
                raise ValueError(f"{pattern!r}: device paths must be absolute")
        return paths

    @field_validator("sysfs")
    @classmethod
    def _relative(cls, attributes: dict[str, str]) -> dict[str, str]:
        for name in attributes:
            _check_relative(name, what="sysfs attribute")
        return attributes


class MountSpec(_Model):
    """A host path every container of the group also gets."""

    host_path: str = Field(alias="hostPath")
    container_path: str = Field(alias="containerPath")
    read_only: bool = Field(default=True, alias="readOnly")
    options: list[str] = Field(default_factory=list)

    @field_validator("host_path", "container_path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"{path!r}: must be an absolute path")
        return path


class Group(_Model):
    """One group of device nodes and how they are offered."""

    name: str
    match: Match
    naming: list[str] = Field(default_factory=lambda: list(DEFAULT_NAMING))
    share: Annotated[int, Field(ge=1, le=MAX_SHARE)] = 1
    """Containers that may use one device at once: 1 is exclusive."""
    sharing: Literal["capacity", "slots"] = "capacity"
    """How a shared device is published: ``capacity``, one device several claims may be
    allocated through consumable capacity (a ``shares`` capacity, one per claim);
    ``slots``, ``share`` devices of their own (``<name>-s0`` …) for clusters without
    consumable capacity."""
    container_path: str | None = Field(default=None, alias="containerPath")
    """Where the node appears in the container (default: its host path); may use
    ``{basename}``, ``{device}`` and ``{index}`` (see ``CONTAINER_PATH_PLACEHOLDERS``)."""
    permissions: str = "rw"
    """The cgroup access the container gets: some of r (read), w (write), m (mknod)."""
    file_mode: int | None = Field(default=None, alias="fileMode")
    """The node's mode in the container (default: as on the host)."""
    uid: int | None = None
    """The node's owner in the container (default: as on the host)."""
    gid: int | None = None
    attributes: dict[str, AttributeSpec] = Field(default_factory=dict)
    capacity: dict[str, str | int | AttributeSource] = Field(default_factory=dict)
    mounts: list[MountSpec] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        problem = dralet.dns_label_problem(name)
        if problem:
            raise ValueError(f"{name!r}: {problem}")
        if len(name) > GROUP_NAME_MAX_LENGTH:
            raise ValueError(f"{name!r}: at most {GROUP_NAME_MAX_LENGTH} characters")
        return name

    @field_validator("naming")
    @classmethod
    def _naming(cls, naming: list[str]) -> list[str]:
        if not naming:
            raise ValueError("give at least one naming source")
        for source in naming:
            if not _NAMING.fullmatch(source):
                raise ValueError(f"{source!r}: expected udev:PROPERTY, sysfs or path")
        return naming

    @field_validator("container_path")
    @classmethod
    def _container_path(cls, path: str | None) -> str | None:
        if path is None:
            return None
        if not path.startswith("/"):
            raise ValueError(f"{path!r}: must be an absolute path")
        unknown = set(_PLACEHOLDERS.findall(path)) - CONTAINER_PATH_PLACEHOLDERS
        if unknown:
            known = ", ".join("{" + p + "}" for p in sorted(CONTAINER_PATH_PLACEHOLDERS))
            raise ValueError(f"{path!r}: unknown placeholder(s) {sorted(unknown)} (known: {known})")
        return path

    @field_validator("permissions")
    @classmethod
    def _permissions(cls, permissions: str) -> str:
        if (
            not permissions
            or set(permissions) - set("rwm")
            or len(set(permissions)) != len(permissions)
        ):
            raise ValueError(f"{permissions!r}: expected some of r, w, m, each once")
        return permissions

    @field_validator("file_mode")
    @classmethod
    def _file_mode(cls, mode: int | None) -> int | None:
        if mode is not None and not 0 <= mode <= 0o7777:
            raise ValueError(f"{mode:o}: expected a mode between 0 and 0o7777")
        return mode

    @field_validator("attributes")
    @classmethod
    def _attribute_names(cls, attributes: dict[str, AttributeSpec]) -> dict[str, AttributeSpec]:
        for name, value in attributes.items():
            problem = dralet.qualified_name_problem(name, single_slash=True)
            if problem:
                raise ValueError(f"attribute {name!r}: {problem}")
            if isinstance(value, str) and len(value) > dralet.ATTRIBUTE_VALUE_MAX_LENGTH:
                limit = dralet.ATTRIBUTE_VALUE_MAX_LENGTH
                raise ValueError(f"attribute {name!r}: at most {limit} characters")
        return attributes

    @field_validator("capacity")
    @classmethod
    def _capacity(
        cls, capacity: dict[str, str | int | AttributeSource]
    ) -> dict[str, str | int | AttributeSource]:
        for name, value in capacity.items():
            problem = dralet.qualified_name_problem(name, single_slash=True)
            if problem:
                raise ValueError(f"capacity {name!r}: {problem}")
            if not isinstance(value, AttributeSource):
                try:
                    dralet.parse_quantity(str(value))
                except dralet.QuantityError:
                    raise ValueError(
                        f"capacity {name!r}: {value!r} is not a Kubernetes quantity"
                    ) from None
        return capacity

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r}: not an environment variable name")
        return env

    @model_validator(mode="after")
    def _shares(self) -> Group:
        if self.share > 1 and self.sharing == "capacity" and "shares" in self.capacity:
            raise ValueError("capacity 'shares' is the driver's own when share > 1")
        return self


class HostdevConfig(_Model):
    """The whole file."""

    groups: Annotated[list[Group], Field(min_length=1)]
    sysfs_root: Path = Field(default=Path("/sys"), alias="sysfsRoot")
    udev_data_dir: Path = Field(default=Path("/run/udev/data"), alias="udevDataDir")
    """udev's database (``c<major>:<minor>`` / ``b<major>:<minor>`` files); where it is
    absent (no udev in the driver's mount namespace), udev naming sources yield nothing."""
    rescan_seconds: Annotated[float, Field(gt=0)] = Field(default=30.0, alias="rescanSeconds")
    """How often the nodes are rescanned even without a file-system event."""

    @field_validator("groups")
    @classmethod
    def _unique(cls, groups: list[Group]) -> list[Group]:
        seen: set[str] = set()
        for group in groups:
            if group.name in seen:
                raise ValueError(f"group name {group.name!r} is used twice")
            seen.add(group.name)
        return groups


def _check_relative(path: str, *, what: str) -> None:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise ValueError(f"{what} {path!r}: expected a path relative to the device's sysfs dir")


def load_config(text: str, source: str = "<config>") -> HostdevConfig:
    """The configuration in ``text`` (YAML); ``ConfigError`` naming ``source`` and the line."""
    try:
        return dralet.parse_yaml_config(text, HostdevConfig, source=source)
    except dralet.YamlConfigError as exc:
        raise ConfigError(str(exc)) from None
