"""The core API's rules for a node selector term (ValidateNodeSelectorTerm in
pkg/apis/core/validation): label keys, operators, the number of values each operator
takes, label values, and ``matchFields`` only on ``metadata.name``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dralet import kubenames
from dralet.validation.diagnostics import Anchor, Finding, Path

__all__ = ["term_findings"]

RULE = "DRA015"
_SET_OPERATORS = ("In", "NotIn")
_EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")
_NUMERIC_OPERATORS = ("Gt", "Lt")
_OPERATORS = (*_SET_OPERATORS, *_EXISTENCE_OPERATORS, *_NUMERIC_OPERATORS)
_FIELD_SELECTOR_KEYS = ("metadata.name",)


def term_findings(term: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    expressions = term.get("matchExpressions")
    if isinstance(expressions, list):
        for index, requirement in enumerate(expressions):
            if isinstance(requirement, dict):
                yield from _expression_findings(
                    requirement, path=(*path, "matchExpressions", index)
                )
    fields = term.get("matchFields")
    if isinstance(fields, list):
        for index, requirement in enumerate(fields):
            if isinstance(requirement, dict):
                yield from _field_findings(requirement, path=(*path, "matchFields", index))


def _values(requirement: dict[str, Any]) -> list[Any]:
    values = requirement.get("values")
    return values if isinstance(values, list) else []


def _operator_findings(
    requirement: dict[str, Any], *, path: Path, operators: tuple[str, ...]
) -> Iterator[Finding]:
    operator = requirement.get("operator")
    values = _values(requirement)
    if not isinstance(operator, str):
        return
    if operator not in operators:
        shown = ", ".join(f'"{o}"' for o in operators)
        yield Finding(
            RULE, (*path, "operator"), f"operator {operator!r}: supported values: {shown}"
        )
        return
    if operator in _SET_OPERATORS and not values:
        yield Finding(
            RULE,
            (*path, "values"),
            "values: must be specified when `operator` is 'In' or 'NotIn'",
            Anchor.KEY,
        )
    elif operator in _EXISTENCE_OPERATORS and values:
        yield Finding(
            RULE,
            (*path, "values"),
            "values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            Anchor.KEY,
        )
    elif operator in _NUMERIC_OPERATORS and len(values) != 1:
        yield Finding(
            RULE,
            (*path, "values"),
            "values: must be specified single value when `operator` is 'Lt' or 'Gt'",
            Anchor.KEY,
        )


def _expression_findings(requirement: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    yield from _operator_findings(requirement, path=path, operators=_OPERATORS)
    key = requirement.get("key")
    if isinstance(key, str):
        problem = kubenames.label_key_problem(key)
        if problem is not None:
            yield Finding(RULE, (*path, "key"), f"node selector key {key!r}: {problem}")
    for index, value in enumerate(_values(requirement)):
        if not isinstance(value, str):
            continue
        # Gt and Lt values are label values to the server like any other, integers or not
        # (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0 pkg/apis/core/validation/validation.go
        # ValidateNodeSelectorRequirement); a non-integer one just never matches a node.
        problem = kubenames.label_value_problem(value)
        if problem is not None:
            yield Finding(RULE, (*path, "values", index), f"value {value!r}: {problem}")


def _field_findings(requirement: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    yield from _operator_findings(requirement, path=path, operators=_SET_OPERATORS)
    key = requirement.get("key")
    if isinstance(key, str) and key not in _FIELD_SELECTOR_KEYS:
        yield Finding(
            RULE, (*path, "key"), f'field selector key {key!r}: supported values: "metadata.name"'
        )
    values = _values(requirement)
    if requirement.get("operator") in _SET_OPERATORS and len(values) > 1:
        yield Finding(
            RULE,
            (*path, "values"),
            "values: must have exactly one value for a field selector",
            Anchor.KEY,
        )
