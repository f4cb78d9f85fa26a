"""Consumable capacity: what one allocation of a device takes from each of its capacities.

Owns the rules of KEP-5075 as the 1.36+ scheduler applies them (facts:
k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/incubating
consumable_capacity.go). For each capacity of the device, an allocation consumes what
the request asks for, rounded up to the policy's next valid value or range step (and
never below the range's minimum); a capacity the request does not name consumes the
policy's default, or all of it when there is no policy. A request that names a
capacity the device lacks, lands off the policy (above the range's maximum, between
steps, not a valid value, unless it equals the default), or would take the device past
its value, does not fit. Values are exact fractions, so fractional ranges need no
separate milli-unit path.

Names: the 1.37 scheduler matches a requested capacity name to the device's exactly as
spelled; from 1.38 both sides are read with the driver's name as the default domain, so
``memory`` and ``gpu.example.com/memory`` name the same capacity of a gpu.example.com
device however the slice spells it, and a request naming it both ways is an error
(kubernetes/kubernetes#142202; k8s.io/dynamic-resource-allocation v0.38.0-beta.0
structured/internal/incubating/consumable_capacity.go resolveCapacityRequests, and
capacityNameForStatus: the allocation records the name as the slice spells it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from dralet.allocation import model, quantity

__all__ = ["CapacityNameError", "consumption", "resolve_names", "shortfall"]


class CapacityNameError(ValueError):
    """A request names one capacity twice, qualified and unqualified."""


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def resolve_names(
    device: model.Device, requests: Mapping[str, Fraction], *, driver: str
) -> dict[str, Fraction]:
    """``requests`` keyed as ``device`` spells its capacities, each name read with
    ``driver`` as its default domain (1.38); a name the device lacks stays as it is."""
    published = {_qualified(name, driver): name for name in device.capacity_values}
    resolved: dict[str, Fraction] = {}
    spelled: dict[str, str] = {}
    for name, amount in requests.items():
        key = published.get(_qualified(name, driver), name)
        if key in spelled:
            raise CapacityNameError(
                f"capacity {key}: requested both as {spelled[key]} and as {name}"
            )
        spelled[key] = name
        resolved[key] = amount
    return resolved


def _consumed(
    requested: Fraction | None, value: Fraction, policy: model.CapacityPolicy | None
) -> Fraction:
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return value
    if policy is None:
        return requested
    if policy.minimum is not None:
        if requested < policy.minimum:
            return policy.minimum
        if policy.step is None:
            return requested
        steps = math.ceil((requested - policy.minimum) / policy.step)
        return policy.minimum + steps * policy.step
    for valid in policy.valid_values:
        if requested <= valid:
            return valid
    return requested


def _off_policy(amount: Fraction, policy: model.CapacityPolicy | None) -> bool:
    if policy is None or (policy.default is not None and amount == policy.default):
        return False
    if policy.minimum is not None:
        if policy.maximum is not None and amount > policy.maximum:
            return True
        return policy.step is not None and (amount - policy.minimum) % policy.step != 0
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumption(device: model.Device, requests: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """What one allocation of ``device`` for a request asking ``requests`` consumes."""
    return {
        name: _consumed(requests.get(name), value, device.capacity_policies.get(name))
        for name, value in device.capacity_values.items()
    }


def shortfall(
    device: model.Device,
    requests: Mapping[str, Fraction],
    *,
    given: Mapping[str, Fraction],
) -> str | None:
    """Why one more allocation of ``device`` does not fit (None when it does); ``given``
    is what its allocations so far consume."""
    for name in requests:
        if name not in device.capacity_values:
            return f"capacity {name}: the device has no such capacity"
    for name, amount in consumption(device, requests).items():
        if _off_policy(amount, device.capacity_policies.get(name)):
            shown = quantity.format_quantity(amount)
            return f"capacity {name}: {shown} is not allowed by its requestPolicy"
        total = given.get(name, Fraction(0)) + amount
        value = device.capacity_values[name]
        if total > value:
            return (
                f"capacity {name}: {quantity.format_quantity(total)} would exceed "
                f"{quantity.format_quantity(value)}"
            )
    return None
