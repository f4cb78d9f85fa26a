"""Cases of the DRA CEL environment's own test table that concern list-type attributes
(DRAListTypeAttributes), ported as facts: the expression, the device's attributes, whether
the gate is on, and what upstream decides (match, no match, a compile error or an
evaluation error, with a phrase of its message). dralet's CEL engine must decide the same.

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/
compile_test.go at v1.37.2 (``testcases``). Case names are upstream's. Cost expectations
are in test_upstream_cel_costs.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from tests.upstream_agreement import Verdict, record

from dralet.allocation import cel

TABLE = "cel compile_test.go"
DRIVER = "dra.example.com"
ATTRIBUTES = f'device.attributes["{DRIVER}"]'


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    attributes: dict[str, Any]
    expected: Any
    """True / False (match), or ("compile", phrase) / ("match", phrase) for an error."""
    lists: bool = True
    """The DRAListTypeAttributes gate."""


def _long_list() -> dict[str, Any]:
    # ResourceSliceMaxAttributeValuesPerDevice (48) values: value-0 .. value-47.
    return {"name": {"strings": [f"value-{i}" for i in range(48)]}}


CASES = [
    Case(
        "macro-exists-on-string",
        f'{ATTRIBUTES}.name.exists(x, x == "fish")',
        {"name": {"string": "fish"}},
        ("match", "expected iterable type"),
    ),
    Case(
        "list-result-type-causes-match-error",
        f"{ATTRIBUTES}.names",
        {"names": {"strings": ["fish", "bird"]}},
        ("match", "could not be converted to bool"),
        lists=False,
    ),
    Case(
        "includes-function-can-evaluate",
        f'{ATTRIBUTES}.name.includes("fish")',
        {"name": {"strings": ["fish", "bird"]}},
        True,
    ),
    Case(
        "list-of-bool",
        f"{ATTRIBUTES}.names.size() == 2",
        {"names": {"bools": [True, False]}},
        True,
        lists=False,
    ),
    Case(
        "list-of-int",
        f"{ATTRIBUTES}.names.size() == 2",
        {"names": {"ints": [1, 2]}},
        True,
        lists=False,
    ),
    Case(
        "list-of-string",
        f"{ATTRIBUTES}.names.size() == 2",
        {"names": {"strings": ["fish", "bird"]}},
        True,
        lists=False,
    ),
    Case(
        "list-of-semver",
        f"{ATTRIBUTES}.names.size() == 2",
        {"names": {"versions": ["1.0.0", "2.0.0"]}},
        True,
        lists=False,
    ),
    Case(
        "macro-on-list-of-int",
        f"{ATTRIBUTES}.names.exists(x, x > 0)",
        {"names": {"ints": [1, 2]}},
        True,
    ),
    Case(
        "macro-on-list-of-string",
        f'{ATTRIBUTES}.names.all(x, x != "")',
        {"names": {"strings": ["fish", "bird"]}},
        True,
    ),
    Case(
        "macro-on-list-of-semver",
        f'{ATTRIBUTES}.names.all(x, x.isGreaterThan(semver("0.0.1")))',
        {"names": {"versions": ["1.0.0", "2.0.0"]}},
        True,
    ),
    Case(
        "includes-function-compilation-error",
        f'{ATTRIBUTES}.attr.includes("fish")',
        {},
        ("compile", "undeclared reference to 'includes'"),
        lists=False,
    ),
    Case(
        "includes-function-compilation-and-eval-success",
        f'{ATTRIBUTES}.attr.includes("fish")',
        {"attr": {"string": "fish"}},
        True,
    ),
    Case(
        "includes-function-on-bool-scalar-positive",
        f"{ATTRIBUTES}.name.includes(true)",
        {"name": {"bool": True}},
        True,
    ),
    Case(
        "includes-function-on-bool-scalar-negative",
        f"{ATTRIBUTES}.name.includes(true)",
        {"name": {"bool": False}},
        False,
    ),
    Case(
        "includes-function-on-bool-list-positive",
        f"{ATTRIBUTES}.name.includes(true)",
        {"name": {"bools": [True, False]}},
        True,
    ),
    Case(
        "includes-function-on-bool-list-negative",
        f"{ATTRIBUTES}.name.includes(false)",
        {"name": {"bools": [True, True]}},
        False,
    ),
    Case(
        "includes-function-on-int-scalar-positive",
        f"{ATTRIBUTES}.name.includes(1)",
        {"name": {"int": 1}},
        True,
    ),
    Case(
        "includes-function-on-int-scalar-negative",
        f"{ATTRIBUTES}.name.includes(1)",
        {"name": {"int": 2}},
        False,
    ),
    Case(
        "includes-function-on-int-list-positive",
        f"{ATTRIBUTES}.name.includes(1)",
        {"name": {"ints": [1, 2]}},
        True,
    ),
    Case(
        "includes-function-on-int-list-negative",
        f"{ATTRIBUTES}.name.includes(3)",
        {"name": {"ints": [1, 2]}},
        False,
    ),
    Case(
        "includes-function-on-string-scalar-positive",
        f'{ATTRIBUTES}.name.includes("fish")',
        {"name": {"string": "fish"}},
        True,
    ),
    Case(
        "includes-function-on-string-scalar-negative",
        f'{ATTRIBUTES}.name.includes("bird")',
        {"name": {"string": "fish"}},
        False,
    ),
    Case(
        "includes-function-on-string-list-positive",
        f'{ATTRIBUTES}.name.includes("fish")',
        {"name": {"strings": ["fish", "bird"]}},
        True,
    ),
    Case(
        "includes-function-on-string-list-negative",
        f'{ATTRIBUTES}.name.includes("cat")',
        {"name": {"strings": ["fish", "bird"]}},
        False,
    ),
    Case(
        "includes-function-on-semver-scalar-positive",
        f'{ATTRIBUTES}.name.includes(semver("1.0.0"))',
        {"name": {"version": "1.0.0"}},
        True,
    ),
    Case(
        "includes-function-on-semver-scalar-negative",
        f'{ATTRIBUTES}.name.includes(semver("2.0.0"))',
        {"name": {"version": "1.0.0"}},
        False,
    ),
    Case(
        "includes-function-on-semver-list-positive",
        f'{ATTRIBUTES}.name.includes(semver("1.0.0"))',
        {"name": {"versions": ["1.0.0", "2.0.0"]}},
        True,
    ),
    Case(
        "includes-function-on-semver-list-negative",
        f'{ATTRIBUTES}.name.includes(semver("3.0.0"))',
        {"name": {"versions": ["1.0.0", "2.0.0"]}},
        False,
    ),
    Case(
        "includes-function-on-very-long-list-positive",
        f'{ATTRIBUTES}.name.includes("value-48")',
        _long_list(),
        False,
    ),
    Case(
        "in-operator-on-list",
        f"1 in {ATTRIBUTES}.names",
        {"names": {"ints": [1, 2, 3]}},
        True,
    ),
    Case(
        "macro-exists-on-version",
        f'{ATTRIBUTES}.name.exists(x, x.isGreaterThan(semver("0.0.1")))',
        {"name": {"version": "1.0.0"}},
        ("match", "expected iterable type"),
    ),
]


def _decide(case: Case) -> Any:
    engine = cel.CelEngine(list_type_attributes=case.lists)
    try:
        selector = engine.compile(case.expression)
    except cel.CelCompileError as error:
        return ("compile", str(error))
    device = cel.device_view(driver=DRIVER, attributes=case.attributes, capacity={})
    try:
        return selector.matches(device)
    except cel.CelRuntimeError as error:
        return ("match", str(error))


def _agrees(expected: Any, got: Any) -> bool:
    if isinstance(expected, tuple):
        return isinstance(got, tuple) and expected[0] == got[0] and expected[1] in got[1]
    return bool(expected is got)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_upstream_cel_case(case: Case) -> None:
    got = _decide(case)
    agrees = _agrees(case.expected, got)
    record(Verdict(TABLE, case.name, agrees))
    assert agrees, f"upstream: {case.expected!r}; dralet: {got!r}"
