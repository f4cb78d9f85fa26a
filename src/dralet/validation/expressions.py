"""CEL selectors: every ``cel.expression`` of a class or request is compiled in the DRA
environment (``dralet.allocation.cel``), and a failure is reported at the expression's
first character with the column inside the expression where compiling stopped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dralet.validation import limits
from dralet.validation.diagnostics import Anchor, Finding, Path

if TYPE_CHECKING:
    from dralet.allocation import cel

__all__ = ["cel_module", "engine", "selector_expressions", "selector_findings"]


def cel_module() -> Any:
    """The CEL module, imported on first use: a manifest without selectors never loads
    the CEL runtime and protobuf."""
    from dralet.allocation import cel

    return cel


@functools.cache
def engine(
    *, list_type_attributes: bool = False, consumable_capacity: bool = False
) -> cel.CelEngine:
    """The CEL engine of a run (one per gate setting); it caches each compiled expression."""
    engine_class: type[cel.CelEngine] = cel_module().CelEngine
    return engine_class(
        list_type_attributes=list_type_attributes, consumable_capacity=consumable_capacity
    )


def _max_cost() -> int:
    from dralet.allocation import celcost

    return celcost.MAX_COST


def selector_expressions(selectors: Any) -> list[tuple[int, str]]:
    """(index, expression) of each well-formed entry of a ``selectors`` list."""
    if not isinstance(selectors, list):
        return []
    out: list[tuple[int, str]] = []
    for index, selector in enumerate(selectors):
        expression = selector.get("cel", {}) if isinstance(selector, dict) else None
        if isinstance(expression, dict) and isinstance(expression.get("expression"), str):
            out.append((index, expression["expression"]))
    return out


_MATCHES_LITERAL = re.compile(
    r"""matches\(\s*(?:[^,()]+,\s*)?(r|R)?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*\)"""
)
_RE2_UNSUPPORTED = re.compile(r"\(\?[=!<>]|\\[1-9]")
"""Lookaround, atomic groups and backreferences: Python has them, RE2 (CEL's) does not."""


def _invalid_regex_literal(expression: str) -> str | None:
    """The first string literal given to ``matches()`` that is no regular expression: the
    API server compiles such a literal with the expression and refuses it (cel-go's
    regex-literal validator, k8s.io/apiserver v0.37.2 pkg/cel/environment/base.go
    (cel.ValidateRegexLiterals))."""
    for match in _MATCHES_LITERAL.finditer(expression):
        raw, literal = match.group(1), match.group(2)[1:-1]
        pattern = literal if raw else _unescaped(literal)
        if _RE2_UNSUPPORTED.search(pattern):
            return pattern
        try:
            re.compile(pattern)
        except re.error:
            return pattern
    return None


def _unescaped(literal: str) -> str:
    """A CEL string literal's escapes: ``\\`` and quotes; other escapes are kept as the
    regular expression reads them."""
    return re.sub(r"\\([\\\"'])", r"\1", literal)


def selector_findings(
    selectors: Any, *, path: Path, lists: bool, consumable: bool
) -> Iterator[Finding]:
    """Limits, the required ``cel`` field, length, compilation and estimated cost of one
    selector list; ``lists``: the target serves list-type attributes (``includes()``);
    ``consumable``: devices have ``allowMultipleAllocations``."""
    if not isinstance(selectors, list):
        return
    if len(selectors) > limits.SELECTORS_PER_REQUEST_OR_CLASS:
        yield Finding(
            "DRA013",
            path,
            f"{len(selectors)} selectors: must have at most "
            f"{limits.SELECTORS_PER_REQUEST_OR_CLASS}",
            Anchor.KEY,
        )
    for index, selector in enumerate(selectors):
        if not isinstance(selector, dict):
            continue
        if selector.get("cel") is None:
            yield Finding(
                "DRA018", (*path, index, "cel"), "selector: `cel` is required", Anchor.KEY
            )
            continue
        expression = (
            selector["cel"].get("expression") if isinstance(selector["cel"], dict) else None
        )
        if not isinstance(expression, str):
            continue
        where = (*path, index, "cel", "expression")
        cel = cel_module()
        if len(expression) > cel.MAX_EXPRESSION_LENGTH:
            yield Finding(
                "DRA021",
                where,
                f"expression is {len(expression)} characters: must be at most "
                f"{cel.MAX_EXPRESSION_LENGTH}",
                Anchor.TEXT,
            )
            continue
        try:
            compiled = engine(list_type_attributes=lists, consumable_capacity=consumable).compile(
                expression
            )
        except cel.CelCompileError as error:
            at = "" if error.column is None else f" (expression column {error.column + 1})"
            yield Finding("DRA020", where, f"CEL {error.message}{at}", Anchor.TEXT)
            continue
        bad_pattern = _invalid_regex_literal(expression)
        if bad_pattern is not None:
            yield Finding(
                "DRA020",
                where,
                f"CEL invalid matches argument {bad_pattern!r}: not a valid regular expression",
                Anchor.TEXT,
            )
            continue
        cost, limit = compiled.max_cost(), _max_cost()
        if cost > limit:
            yield Finding(
                "DRA025",
                where,
                f"too complex, exceeds cost limit: estimated worst-case cost {cost:,} is over "
                f"{limit:,}",
                Anchor.TEXT,
            )
