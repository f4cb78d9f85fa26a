"""Text-level reading of CEL selector expressions, for the CEL layer and ``--explain``.

Owns two things that need only the expression's characters, not a parser: splitting a
top-level ``&&`` chain into its clauses, and rewriting ``device.attributes[d]`` and
``device.capacity[d]`` lookups so an unknown domain reads as an empty map, as it does
in Kubernetes. String literals are skipped, brackets are balanced.
"""

from __future__ import annotations

__all__ = ["default_missing_domains", "split_conjunction"]

_QUOTES = ("'", '"')
_STRING_PREFIXES = frozenset("rRbB")
_OPEN = "([{"
_CLOSE = ")]}"
_AND = "&&"
_OR = "||"
_TERNARY = "?"
_DOMAIN_MAPS = ("device.attributes[", "device.capacity[")
_TRIPLE = 3


def _is_identifier_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _string_end(text: str, start: int) -> int | None:
    """The index just past the string literal starting at ``start``, or None if none does."""
    index = start
    raw = False
    while index < len(text) and text[index] in _STRING_PREFIXES:
        raw = raw or text[index] in "rR"
        index += 1
    if index >= len(text) or text[index] not in _QUOTES:
        return None
    if index > start and start > 0 and _is_identifier_char(text[start - 1]):
        return None
    quote = text[index]
    delimiter = quote * _TRIPLE if text.startswith(quote * _TRIPLE, index) else quote
    index += len(delimiter)
    while index < len(text):
        if not raw and text[index] == "\\":
            index += 2
            continue
        if text.startswith(delimiter, index):
            return index + len(delimiter)
        index += 1
    return len(text)


def _top_level_positions(text: str, token: str) -> list[int]:
    positions: list[int] = []
    depth = 0
    index = 0
    while index < len(text):
        end = _string_end(text, index)
        if end is not None:
            index = end
            continue
        char = text[index]
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif depth == 0 and text.startswith(token, index):
            positions.append(index)
            index += len(token)
            continue
        index += 1
    return positions


def split_conjunction(expression: str) -> tuple[str, ...]:
    """The clauses of a top-level ``a && b && c`` chain; the whole expression otherwise.

    A top-level ``||`` or ``?:`` binds looser than ``&&``, so such an expression is not a
    chain and comes back as a single clause.
    """
    if _top_level_positions(expression, _OR) or _top_level_positions(expression, _TERNARY):
        return (expression.strip(),)
    clauses: list[str] = []
    start = 0
    for position in _top_level_positions(expression, _AND):
        clauses.append(expression[start:position].strip())
        start = position + len(_AND)
    clauses.append(expression[start:].strip())
    return tuple(clause for clause in clauses if clause)


def _closing_bracket(text: str, start: int) -> int | None:
    depth = 1
    index = start
    while index < len(text):
        end = _string_end(text, index)
        if end is not None:
            index = end
            continue
        if text[index] in _OPEN:
            depth += 1
        elif text[index] in _CLOSE:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def default_missing_domains(expression: str) -> str:
    """``expression`` with each ``device.attributes[d]`` read as ``[?(d)].orValue({})``.

    The rewritten text evaluates the same as the original except that a domain the device
    does not have gives an empty map instead of a "no such key" error.
    """
    out: list[str] = []
    index = 0
    while index < len(expression):
        end = _string_end(expression, index)
        if end is not None:
            out.append(expression[index:end])
            index = end
            continue
        prefix = next((p for p in _DOMAIN_MAPS if expression.startswith(p, index)), None)
        previous = expression[index - 1] if index else ""
        if prefix is None or _is_identifier_char(previous) or previous == ".":
            out.append(expression[index])
            index += 1
            continue
        inner_start = index + len(prefix)
        closing = _closing_bracket(expression, inner_start)
        if closing is None or expression.startswith("?", inner_start):
            out.append(expression[index:])
            break
        inner = default_missing_domains(expression[inner_start:closing])
        out.append(f"{prefix}?({inner})].orValue({{}})")
        index = closing + 1
    return "".join(out)
