"""The values every check produces: severities, findings located by path, diagnostics.

A check returns ``Finding`` values that name a place in a manifest by its path
(``("spec", "devices", "requests", 0, "allocationMode")``); the engine turns each
into a ``Diagnostic`` with a file, line and column. Owned here so that checks, the
report and the CLI agree on one shape.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Anchor", "Diagnostic", "Finding", "Path", "Severity", "field_path"]

Path = tuple[str | int, ...]


_MAP_FIELDS = frozenset({"attributes", "labels", "annotations", "counters", "consumedCapacity"})
"""Fields whose keys are map keys, not field names: the server writes ``attributes[numa]``."""


def _is_map_key(path: Path, index: int) -> bool:
    parent = path[index - 1] if index >= 1 else None
    if parent in _MAP_FIELDS:
        return True
    if parent == "capacity" and index >= 2:
        owner = path[index - 2]  # a device's capacity is a map; a request's is a struct
        return owner == "basic" or (
            isinstance(owner, int) and index >= 3 and path[index - 3] == "devices"
        )
    return parent == "requests" and index >= 2 and path[index - 2] == "capacity"


def field_path(path: Path) -> str:
    """``path`` as kube-apiserver names a field in its errors: ``spec.devices.requests[0].name``,
    map keys in brackets (``spec.devices[0].attributes[numa]``)."""
    text = ""
    for index, part in enumerate(path):
        if isinstance(part, int) or _is_map_key(path, index) or not part.isidentifier():
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


class Severity(enum.Enum):
    """How bad a diagnostic is; errors fail the run, warnings only under ``--strict``."""

    ERROR = "error"
    WARNING = "warning"


class Anchor(enum.Enum):
    """Which part of the node at a path a finding points at."""

    KEY = "key"
    """The key of a mapping entry (or the start of a list item)."""
    VALUE = "value"
    """The value of a mapping entry (or the list item itself)."""
    TEXT = "text"
    """The first character of a string value's text (past a quote, inside a block)."""


@dataclass(frozen=True)
class Finding:
    """One problem found by a check, located by its path inside one object."""

    rule: str
    path: Path
    message: str
    anchor: Anchor = Anchor.VALUE
    field: str | None = None
    """The field as the server names it, where that is not the path's own name (admission
    names a template's request ``spec.devices.requests[0]``, not ``spec.spec.…``)."""


@dataclass(frozen=True)
class Diagnostic:
    """One reported problem, at a line and column (both 1-based) of one file."""

    file: str
    line: int
    column: int
    rule: str
    severity: Severity
    message: str
    fix: str
    field: str = ""
    """Where in the object, as the server names it (``spec.devices.requests[0]``); empty
    for problems of the file itself and for those across objects."""

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.file, self.line, self.column, self.rule, self.message)
