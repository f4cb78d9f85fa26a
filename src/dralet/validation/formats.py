"""The value formats the API server checks beside names: strict semver versions and
resource quantities. Name rules live in ``dralet.kubenames``.

Each function returns the reason a value is invalid, or ``None`` when it is valid,
worded like the API server's own messages.
"""

from __future__ import annotations

from dralet.allocation import quantity, semver

__all__ = ["quantity_problem", "semver_problem"]


def semver_problem(value: str) -> str | None:
    """A strict semantic version 2.0.0 string: MAJOR.MINOR.PATCH, no 'v' prefix."""
    try:
        semver.parse_version(value)
    except semver.SemverError:
        hint = " (drop the leading 'v')" if value[:1] in ("v", "V") else ""
        return f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH){hint}"
    return None


def quantity_problem(value: object) -> str | None:
    """A resource quantity such as ``80Gi``, ``1.5``, ``500m`` or ``1e3``."""
    if isinstance(value, bool):
        return f"{value!r} is not a quantity"
    if isinstance(value, int | float):
        return None
    if isinstance(value, str):
        try:
            quantity.parse_quantity(value)
        except quantity.QuantityError:
            pass
        else:
            return None
    return f"{value!r} is not a quantity (for example 80Gi, 4, 500m)"
