"""The API server's rules for a device capacity's ``requestPolicy`` (consumable capacity):
only on a device with ``allowMultipleAllocations: true``; one of ``validValues`` or
``validRange``, each with a ``default``; values sorted, unique, at most 10, none above the
capacity, the default among them; a range's ``min`` required, not above ``max`` nor the
capacity, the default not below ``min``.

Facts: k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0
pkg/apis/resource/validation/validation.go (validateSingleAllocatableDeviceCapacity,
validateRequestPolicy, validateRequestPolicyValidValues, validateRequestPolicyRange) and
pkg/apis/resource/types.go (CapacityRequestPolicyDiscreteMaxOptions). What a range's
``step`` must satisfy is not checked here (see docs/validate.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from dralet.validation import formats
from dralet.validation.diagnostics import Anchor, Finding, Path

__all__ = ["VALID_VALUES_MAX", "request_policy_findings"]

VALID_VALUES_MAX = 10
"""CapacityRequestPolicyDiscreteMaxOptions."""
RULE = "DRA014"


def request_policy_findings(
    capacity: Any, *, multiple_allocations: bool, path: Path
) -> Iterator[Finding]:
    """``capacity``: a device's capacity map; ``path``: where that map is."""
    if not isinstance(capacity, dict):
        return
    for name, entry in capacity.items():
        if not isinstance(entry, dict) or entry.get("requestPolicy") is None:
            continue
        where = (*path, name, "requestPolicy")
        if not multiple_allocations:
            yield Finding(
                "DRA018",
                where,
                "requestPolicy: allowMultipleAllocations must be true on the device",
                Anchor.KEY,
            )
            continue
        policy = entry["requestPolicy"]
        if isinstance(policy, dict):
            value = formats.quantity_value(entry.get("value"))
            yield from _policy_findings(policy, Fraction(0) if value is None else value, where)


def _policy_findings(policy: dict[str, Any], value: Fraction, path: Path) -> Iterator[Finding]:
    values = policy.get("validValues")
    valid_range = policy.get("validRange")
    default = formats.quantity_value(policy.get("default"))
    if values and valid_range is not None:
        yield Finding(
            RULE,
            path,
            "requestPolicy: only one of `validValues` or `validRange` may be set",
            Anchor.KEY,
        )
        return
    if isinstance(values, list) and values:
        if policy.get("default") is None:
            yield Finding(
                RULE, (*path, "default"), "`default` is required with validValues", Anchor.KEY
            )
            return
        yield from _values_findings(values, default, value, (*path, "validValues"))
    elif isinstance(valid_range, dict):
        if policy.get("default") is None:
            yield Finding(
                RULE, (*path, "default"), "`default` is required with validRange", Anchor.KEY
            )
            return
        yield from _range_findings(valid_range, default, value, (*path, "validRange"))


def _values_findings(
    values: list[Any], default: Fraction | None, value: Fraction, path: Path
) -> Iterator[Finding]:
    amounts = [formats.quantity_value(v) for v in values]
    for index in range(1, len(amounts)):
        before, here = amounts[index - 1], amounts[index]
        if before is not None and here is not None and before > here:
            yield Finding(RULE, (*path, index), "validValues must be sorted in ascending order")
    if len(values) > VALID_VALUES_MAX:
        yield Finding(
            "DRA013",
            path,
            f"{len(values)} validValues: must have at most {VALID_VALUES_MAX}",
            Anchor.KEY,
        )
    seen: set[Fraction] = set()
    for index, amount in enumerate(amounts):
        if amount is None:
            continue
        if amount in seen:
            yield Finding("DRA016", (*path, index), f"duplicate valid value {values[index]!r}")
        seen.add(amount)
        if amount > value:
            yield Finding(RULE, (*path, index), "valid value is larger than the capacity value")
    if default is not None and default not in seen:
        yield Finding(RULE, path, "the default is not one of validValues", Anchor.KEY)


def _range_findings(
    valid_range: dict[str, Any], default: Fraction | None, value: Fraction, path: Path
) -> Iterator[Finding]:
    if valid_range.get("min") is None:
        yield Finding(RULE, (*path, "min"), "`min` is required in validRange", Anchor.KEY)
        return
    low = formats.quantity_value(valid_range["min"])
    high = formats.quantity_value(valid_range.get("max"))
    if low is None:
        return
    if low > value:
        yield Finding(RULE, (*path, "min"), "min is larger than the capacity value")
    if default is not None and default < low:
        yield Finding(RULE, (*path, "default"), "the default is less than min", Anchor.KEY)
    if valid_range.get("max") is not None and high is not None:
        if low > high:
            yield Finding(RULE, (*path, "max"), "min is larger than max")
        if high > value:
            yield Finding(RULE, (*path, "max"), "max is larger than the capacity value")
