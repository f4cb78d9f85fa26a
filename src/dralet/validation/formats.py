"""The value formats the API server checks beside names: strict semver versions and
resource quantities, and how a release tightens the qualified-name rule of
``dralet.kubenames``.

Each function returns the reason a value is invalid, or ``None`` when it is valid,
worded like the API server's own messages.
"""

from __future__ import annotations

import re
from fractions import Fraction

from dralet import kubenames
from dralet.allocation import quantity, semver

__all__ = ["qualified_name_problem", "quantity_problem", "quantity_value", "semver_problem"]

_NUMBER = re.compile(r"\d+")


def semver_problem(value: str, *, digits_max: int | None = None) -> str | None:
    """A strict semantic version 2.0.0 string: MAJOR.MINOR.PATCH, no 'v' prefix; with
    ``digits_max``, no number (nor digit-only pre-release identifier) longer than that."""
    try:
        semver.parse_version(value)
    except semver.SemverError:
        hint = " (drop the leading 'v')" if value[:1] in ("v", "V") else ""
        return f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH){hint}"
    if digits_max is None:
        return None
    core_and_pre = value.partition("+")[0]
    core, _, pre = core_and_pre.partition("-")
    identifiers = [*core.split("."), *(pre.split(".") if pre else [])]
    if any(_NUMBER.fullmatch(i) and len(i) > digits_max for i in identifiers):
        return (
            f"{value!r}: numbers in a version must have at most {digits_max} digits "
            "(to fit in int64)"
        )
    return None


def qualified_name_problem(
    value: str, *, one_slash: bool, require_domain: bool = False, lower_case_domain: bool = False
) -> str | None:
    """An attribute or capacity name (``id`` or ``domain/id``); with ``one_slash`` (1.38
    and later) a name of three or more '/'-separated parts is refused too."""
    return kubenames.qualified_name_problem(
        value,
        require_domain=require_domain,
        single_slash=one_slash,
        lower_case_domain=lower_case_domain,
    )


_SUFFIX_ONLY = re.compile(r"[+-]?(?:[KMGTPE]i|[numkMGTPE])")
"""A suffix without digits is the zero quantity to the server's parser (parseQuantityString
in k8s.io/apimachinery pkg/api/resource/quantity.go reads an empty number)."""


def quantity_value(value: object) -> Fraction | None:
    """The amount of a quantity the server would accept (``null`` is zero), else None."""
    if value is None:
        return Fraction(0)
    if isinstance(value, bool) or quantity_problem(value) is not None:
        return None
    if isinstance(value, int | float):
        return Fraction(value)
    text = str(value).strip()
    if _SUFFIX_ONLY.fullmatch(text):
        return Fraction(0)
    return quantity.parse_quantity(text)


def quantity_problem(value: object) -> str | None:
    """A resource quantity such as ``80Gi``, ``1.5``, ``500m`` or ``1e3``. ``null`` is the
    zero quantity, and spaces around the text are trimmed, as the server decodes a
    Quantity (k8s.io/apimachinery v0.37.2 and v0.38.0-beta.0 pkg/api/resource/quantity.go
    UnmarshalJSON)."""
    if isinstance(value, bool):
        return f"{value!r} is not a quantity"
    if value is None or isinstance(value, int | float):
        return None
    if isinstance(value, str):
        if _SUFFIX_ONLY.fullmatch(value.strip()):
            return None
        try:
            quantity.parse_quantity(value.strip())
        except quantity.QuantityError:
            pass
        else:
            return None
    return f"{value!r} is not a quantity (for example 80Gi, 4, 500m)"
