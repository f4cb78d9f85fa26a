"""Backend factories: how ``dralet run --driver NAME`` finds and builds a backend.

``NAME`` is either ``package.module:callable`` or the name of an entry point in the
``dralet.drivers`` group, which is how an installed driver package announces itself::

    [project.entry-points."dralet.drivers"]
    acme-fpga = "acme_fpga.driver:factory"

The callable is a ``BackendFactory``: it gets the driver's ``Settings`` and its
``DriverConfig`` (the ``--driver-config`` file and the ``--driver-option`` pairs) and
returns the backend (a ``ClaimBackend``). It is called once
the directories are checked, before any socket exists; whatever it raises stops the
driver with one line naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from dralet import errors
from dralet.node.backend import ClaimBackend
from dralet.node.config import Settings

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendFactory",
    "DriverConfig",
    "DriverLoadError",
    "DriverStartError",
    "available",
    "build",
    "find",
]

ENTRY_POINT_GROUP = "dralet.drivers"
"""The entry-point group installed driver packages register their factory in."""

BACKEND_METHODS = (
    "devices",
    "prepare_claim",
    "release_claim",
    "devices_in_use",
    "survives_reboot",
    "health",
)
"""What a factory's result must have to be used as a ``ClaimBackend``."""


class DriverLoadError(errors.InvalidRequestError):
    """The named driver cannot be found or loaded (unknown name, bad ``module:callable``,
    unreadable ``--driver-config``); nothing was started."""


class DriverStartError(errors.PermanentError):
    """The driver's factory raised, or returned something that is not a backend."""


@dataclass(frozen=True)
class DriverConfig:
    """A driver's own configuration, handed to its factory as given.

    ``path`` and ``text`` are the ``--driver-config`` file (None and '' when none was
    given); ``options`` are the ``--driver-option KEY=VALUE`` pairs. What they mean is
    the driver's business; ``load()`` parses the file as YAML (or JSON) for drivers
    that want a mapping.
    """

    path: Path | None = None
    text: str = ""
    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path | None, options: Mapping[str, str] | None = None) -> DriverConfig:
        """The config of file ``path`` (read now); ``DriverLoadError`` if unreadable."""
        text = ""
        if path is not None:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise DriverLoadError(f"--driver-config {path}: {reason}") from None
        return cls(path=path, text=text, options=dict(options or {}))

    def load(self) -> dict[str, Any]:
        """The file as a mapping ({} without a file); ``DriverLoadError`` naming the file
        when it is not YAML or not a mapping."""
        if not self.text.strip():
            return {}
        import yaml  # only a driver given a config file parses one

        try:
            data = yaml.safe_load(self.text)
        except yaml.YAMLError as exc:
            raise DriverLoadError(f"--driver-config {self.path}: not YAML: {exc}") from None
        if not isinstance(data, dict):
            raise DriverLoadError(f"--driver-config {self.path}: expected a mapping")
        return data

    def settings(self, keys: Mapping[str, str]) -> dict[str, Any]:
        """``load()`` with each ``--driver-option`` put over its key in the file (``keys``:
        option name → file key); ``ValueError`` naming any setting not in ``keys``."""
        values = self.load()
        unknown = sorted(set(values) - set(keys.values())) + sorted(set(self.options) - set(keys))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)} (known: {', '.join(keys)})")
        for option, key in keys.items():
            if option in self.options:
                values[key] = self.options[option]
        return values


class BackendFactory(Protocol):
    """Builds a driver's backend from the driver's settings and its own configuration."""

    def __call__(self, settings: Settings, config: DriverConfig) -> ClaimBackend: ...


def available() -> dict[str, str]:
    """Installed driver name → its ``module:callable``, sorted by name."""
    points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {point.name: point.value for point in sorted(points, key=lambda p: p.name)}


def _import(target: str, *, name: str) -> Any:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise DriverLoadError(f"driver {name!r}: expected package.module:callable")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise DriverLoadError(f"driver {name!r}: cannot import {module_name}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise DriverLoadError(f"driver {name!r}: {module_name} has no {attribute}") from None
    if not callable(value):
        raise DriverLoadError(f"driver {name!r}: {target} is not callable")
    return value


def find(name: str) -> tuple[str, BackendFactory]:
    """(``module:callable``, the factory) of driver ``name``: an entry point of
    ``dralet.drivers``, or a ``module:callable`` itself. ``DriverLoadError`` if none."""
    if ":" in name:
        target = name
    else:
        installed = available()
        if name not in installed:
            names = ", ".join(installed) or "none installed"
            raise DriverLoadError(f"unknown driver {name!r} (available: {names})")
        target = installed[name]
    factory: BackendFactory = _import(target, name=name)
    return target, factory


def build(
    name: str, factory: BackendFactory, settings: Settings, config: DriverConfig
) -> ClaimBackend:
    """Call ``factory``; whatever goes wrong is one ``DriverStartError`` naming ``name``."""
    try:
        backend = factory(settings, config)
    except DriverLoadError:
        raise
    except Exception as exc:
        raise DriverStartError(
            f"driver {name!r} could not start: {type(exc).__name__}: {exc}"
        ) from exc
    missing = [m for m in BACKEND_METHODS if not callable(getattr(backend, m, None))]
    if missing:
        raise DriverStartError(
            f"driver {name!r} returned {type(backend).__name__}, not a ClaimBackend "
            f"(missing: {', '.join(missing)})"
        )
    return backend
