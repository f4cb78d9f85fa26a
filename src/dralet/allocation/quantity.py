"""Kubernetes resource quantities (``80Gi``, ``1500m``, ``1e3``) as exact rational numbers.

Owns parsing and arithmetic for the CEL ``quantity()`` library; the CEL layer carries a
quantity as its text and calls into this module for every comparison.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "format_quantity", "parse_quantity"]

_BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_EXPONENTS: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
)
_PARSE_CACHE_SIZE = 4096
# Quantities only ever have power-of-ten denominators; this bounds the digits printed.
_MAX_FRACTION_DIGITS = 40
_DECIMAL_BASE = 10


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string; raises ``QuantityError`` when it is not one."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SUFFIXES:
        return number * _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_EXPONENTS:
        return number * Fraction(_DECIMAL_BASE) ** _DECIMAL_EXPONENTS[suffix]
    return number * Fraction(_DECIMAL_BASE) ** int(suffix[1:])


def format_quantity(value: Fraction) -> str:
    """A plain decimal spelling of ``value`` that ``parse_quantity`` reads back exactly."""
    if value.denominator == 1:
        return str(value.numerator)
    for digits in range(1, _MAX_FRACTION_DIGITS + 1):
        scaled = value * _DECIMAL_BASE**digits
        if scaled.denominator == 1:
            sign = "-" if scaled < 0 else ""
            whole, fraction = divmod(abs(scaled.numerator), _DECIMAL_BASE**digits)
            return f"{sign}{whole}.{fraction:0{digits}d}"
    raise QuantityError(f"{value} has no finite decimal form")
