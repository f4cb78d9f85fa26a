"""The values every check produces: severities, findings located by path, diagnostics.

A check returns ``Finding`` values that name a place in a manifest by its path
(``("spec", "devices", "requests", 0, "allocationMode")``); the engine turns each
into a ``Diagnostic`` with a file, line and column. Owned here so that checks, the
report and the CLI agree on one shape.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Anchor", "Diagnostic", "Finding", "Path", "Severity"]

Path = tuple[str | int, ...]


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

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.file, self.line, self.column, self.rule, self.message)
