"""Label and field selectors, parsed and matched as the API server does."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dralet.apiserver.errors import ApiStatusError
from dralet.apiserver.kinds import Kind

__all__ = ["matcher"]


def _split_selector(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


@dataclass(frozen=True)
class _Requirement:
    """One term of a label or field selector."""

    key: str
    operator: str
    """``=``, ``!=``, ``in``, ``notin``, ``exists`` or ``!exists``."""
    values: frozenset[str] = frozenset()

    def matches(self, value: str | None) -> bool:
        if self.operator == "exists":
            return value is not None
        if self.operator == "!exists":
            return value is None
        if self.operator in ("=", "in"):
            return value in self.values
        return value not in self.values


def _parse_label_selector(selector: str) -> list[_Requirement]:
    requirements = []
    for term in _split_selector(selector):
        words = term.split(None, 2)
        if len(words) == len(("key", "op", "values")) and words[1] in ("in", "notin"):
            values = frozenset(v.strip() for v in words[2].strip("()").split(","))
            requirements.append(_Requirement(words[0], words[1], values))
        elif "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            requirements.append(_Requirement(key, "!=", frozenset({value})))
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            requirements.append(_Requirement(key, "=", frozenset({value})))
        elif term.startswith("!"):
            requirements.append(_Requirement(term[1:].strip(), "!exists"))
        else:
            requirements.append(_Requirement(term, "exists"))
    return requirements


def _parse_field_selector(kind: Kind, selector: str) -> list[_Requirement]:
    requirements = []
    for term in _split_selector(selector):
        operator = "!=" if "!=" in term else "="
        key, value = (p.strip() for p in term.replace("==", "=").split(operator, 1))
        if key not in kind.field_labels:
            raise ApiStatusError(400, "BadRequest", f"field label not supported: {key}")
        requirements.append(_Requirement(key, operator, frozenset({value})))
    return requirements


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def matcher(
    kind: Kind, label_selector: str, field_selector: str
) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an object (v1 shape) matches both selectors; 400 on an unsupported field."""
    labels = _parse_label_selector(label_selector)
    fields = _parse_field_selector(kind, field_selector)

    def matches(obj: Mapping[str, Any]) -> bool:
        meta_labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(meta_labels.get(r.key)) for r in labels) and all(
            r.matches(_field_value(obj, r.key)) for r in fields
        )

    return matches
