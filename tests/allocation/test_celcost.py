"""dralet's estimate of a selector's worst-case cost, on cases worked out by hand from the
cost model (the upstream table's own cases are in test_upstream_cel_costs.py)."""

from __future__ import annotations

import pytest

from dralet.allocation import cel, celcost, semver


def cost(expression: str, *, consumable: bool = True) -> int:
    engine = cel.CelEngine(list_type_attributes=True, consumable_capacity=consumable)
    return engine.compile(expression).max_cost()


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # device (1) + .attributes on a struct (1); a presence test itself is free.
        ("has(device.attributes.x)", 2),
        # 4 to reach the capacity, quantity("1Gi") ceil(3 * 0.1) = 1, Quantity == Quantity 1.
        ('device.capacity["d"].mem == quantity("1Gi")', 6),
        # Two list literals (10 each) + 2 x 1 pairs + the call (1); equivalent counts pairs twice.
        ("sets.contains([1, 2], [1])", 23),
        ("sets.equivalent([1, 2], [1])", 25),
        # The bind's empty iteration list (10) + device.driver (2) + n == "abc" (1 + the
        # comparison of at most 3 characters, ceil(3 * 0.1)): the bound n keeps the driver's
        # declared size.
        ('cel.bind(n, device.driver, n == "abc")', 10 + 2 + 1 + 1),
        # The range (2) + the result (1) + 32 domains x (the loop condition, a call on the
        # accumulator: 2, + the step, an && whose cost is its operands': 1).
        ("device.attributes.all(d, true)", 2 + 1 + 32 * (2 + 1)),
    ],
)
def test_hand_worked_costs(expression: str, expected: int) -> None:
    assert cost(expression) == expected


def test_cost_grows_with_nesting_and_saturates_instead_of_overflowing() -> None:
    one = cost("device.attributes.all(d, device.attributes[d].all(a, a != 'x'))")
    two = cost(
        "device.attributes.all(d, device.attributes.all(e, "
        "device.attributes[d].all(a, device.attributes[e].all(b, a != b))))"
    )
    assert one < celcost.MAX_COST < two
    # A string of unknown length compared inside a macro: the estimate saturates at 2^64-1.
    unbounded = cost('device.attributes["d"].s.split(",").all(x, x + x == "ab")')
    assert unbounded == 2**64 - 1


def test_allow_multiple_allocations_is_a_device_field_behind_its_gate() -> None:
    expression = "device.allowMultipleAllocations"
    with pytest.raises(cel.CelCompileError, match="allowMultipleAllocations"):
        cel.CelEngine().compile(expression)
    selector = cel.CelEngine(consumable_capacity=True).compile(expression)
    shared = cel.device_view(
        driver="d", attributes={}, capacity={}, allow_multiple_allocations=True
    )
    whole = cel.device_view(driver="d", attributes={}, capacity={})
    assert selector.matches(shared) is True
    assert selector.matches(whole) is False


@pytest.mark.parametrize(
    ("text", "normal"),
    [("v1.2.3", "1.2.3"), ("v1", "1.0.0"), ("1.02", "1.2.0"), ("v01.0.0-rc.1", "1.0.0-rc.1")],
)
def test_semver_normalize(text: str, normal: str) -> None:
    assert semver.normalize(text) == normal


def test_semver_normalize_refuses_short_versions_with_prerelease() -> None:
    with pytest.raises(semver.SemverError):
        semver.normalize("v1-rc")


def test_two_argument_semver_normalizes_only_when_asked() -> None:
    device = cel.device_view(driver="d", attributes={"v": {"version": "1.2.0"}}, capacity={})
    engine = cel.CelEngine()
    normalized = engine.compile('device.attributes["d"].v == semver("v1.2", true)')
    assert normalized.matches(device) is True
    assert engine.compile('isSemver("v1.2", true) && !isSemver("v1.2", false)').matches(device)
