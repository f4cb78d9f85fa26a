"""What every command's exit status means, one set of output formats, and the one-line
error that bad input gets (no traceback unless ``--debug``).

The exit-status table lives here alone: every command's ``--help`` epilogue is
``epilog(...)`` and the site's exit-status page shows ``EXIT_TABLE`` (a test compares them).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import IO, Any

import click

__all__ = [
    "BAD_INPUT",
    "EXIT_TABLE",
    "FINDINGS",
    "INTERRUPTED",
    "OK",
    "OUTPUT_FORMATS",
    "BadInput",
    "epilog",
]

OK = 0
"""Success: no findings, every check passed."""
FINDINGS = 1
"""Findings: errors (or warnings with --strict), failed checks, claims or pods that did not fit."""
BAD_INPUT = 2
"""Bad input: a usage error, an unreadable file or manifest, an unreachable or unusable cluster."""
INTERRUPTED = 130
"""Stopped by Ctrl-C (128 + SIGINT, as shells report it)."""
OUTPUT_FORMATS = ("table", "json", "yaml")
EPILOG_WIDTH = 78
"""The table fits an 80-column terminal (click indents the epilogue by two)."""

EXIT_TABLE: tuple[tuple[int, str], ...] = (
    (OK, "success: nothing found, every check passed"),
    (FINDINGS, "findings: errors, failed checks, inconsistencies, claims that do not fit"),
    (
        BAD_INPUT,
        "bad input: usage, unreadable or unusable files, an unreachable or unusable cluster",
    ),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)
"""The statuses every command shares; a command adds its own only with the reason."""


def epilog(findings: str, extra: Sequence[tuple[int, str]] = (), *, bad_input: str = "") -> str:
    """The ``--help`` epilogue: the shared table, what status 1 means for this command
    (``findings``), what else is bad input to it (``bad_input``), and any status of its
    own with its reason (``extra``)."""
    rows = [(code, text) for code, text in EXIT_TABLE if code != INTERRUPTED]
    rows[FINDINGS] = (FINDINGS, f"findings: {findings}")
    if bad_input:
        rows[BAD_INPUT] = (BAD_INPUT, f"{rows[BAD_INPUT][1]}, {bad_input}")
    rows.extend(extra)
    rows.extend((code, text) for code, text in EXIT_TABLE if code == INTERRUPTED)
    lines = [
        textwrap.fill(
            text,
            EPILOG_WIDTH,
            initial_indent=f"  {code:<4}",
            subsequent_indent=" " * 6,
            break_on_hyphens=False,
        )
        for code, text in rows
    ]
    # "\b" keeps click from re-wrapping the table into one paragraph.
    return "\b\nExit status:\n" + "\n".join(lines)


class BadInput(click.ClickException):
    """Bad input: one line on stderr, exit status 2."""

    exit_code = BAD_INPUT

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)
