"""What every command's exit status means, one set of output formats, and the one-line
error that bad input gets (no traceback unless ``--debug``)."""

from __future__ import annotations

from typing import IO, Any

import click

__all__ = ["BAD_INPUT", "EPILOG", "FINDINGS", "OK", "OUTPUT_FORMATS", "BadInput"]

OK = 0
"""Success: no findings, every claim allocated."""
FINDINGS = 1
"""Findings: errors (or warnings with --strict), claims or pods that did not fit."""
BAD_INPUT = 2
"""Bad input: a usage error, an unreadable file, a manifest that cannot be used."""
OUTPUT_FORMATS = ("table", "json", "yaml")

EPILOG = (
    "Exit status: 0 success; 1 findings (errors, or warnings with --strict; claims or "
    "pods that do not fit); 2 bad input (usage, unreadable or unusable manifests, "
    "unreachable cluster)."
)


class BadInput(click.ClickException):
    """Bad input: one line on stderr, exit status 2."""

    exit_code = BAD_INPUT

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)
