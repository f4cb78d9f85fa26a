"""Writing a run's diagnostics: one ``file:line:col: ID severity message`` line each
and a summary line, or a JSON list; and the ``--explain`` text of a rule."""

from __future__ import annotations

import json
from collections.abc import Sequence

from dralet.validation.catalog import Rule
from dralet.validation.diagnostics import Diagnostic, Severity

__all__ = ["explain", "json_report", "summary", "text_line", "yaml_report"]


def text_line(diagnostic: Diagnostic) -> str:
    return (
        f"{diagnostic.file}:{diagnostic.line}:{diagnostic.column}: {diagnostic.rule} "
        f"{diagnostic.severity.value} {diagnostic.message}"
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def summary(diagnostics: Sequence[Diagnostic], *, files: int, objects: int) -> str:
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    warnings = len(diagnostics) - errors
    read = f"{_plural(files, 'file')}, {_plural(objects, 'object')} checked"
    if not diagnostics:
        return f"no problems found ({read})"
    return f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')} ({read})"


def _records(diagnostics: Sequence[Diagnostic]) -> list[dict[str, object]]:
    return [
        {
            "file": d.file,
            "line": d.line,
            "column": d.column,
            "field": d.field,
            "id": d.rule,
            "severity": d.severity.value,
            "message": d.message,
            "fix": d.fix,
        }
        for d in diagnostics
    ]


def json_report(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps(_records(diagnostics), indent=2)


def yaml_report(diagnostics: Sequence[Diagnostic]) -> str:
    import yaml

    text: str = yaml.safe_dump(_records(diagnostics), sort_keys=False, width=100)
    return text


def _indented(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in text.rstrip("\n").split("\n"))


def explain(rule: Rule) -> str:
    return (
        f"{rule.id} ({rule.severity.value}): {rule.title}\n\n"
        f"Why: {rule.why}\n"
        f"Fix: {rule.fix}\n\n"
        f"Bad:\n{_indented(rule.bad)}\n\n"
        f"Good:\n{_indented(rule.good)}\n"
    )
