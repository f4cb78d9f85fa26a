"""The worst-case costs the DRA CEL environment's own test table expects, ported as facts:
each case's expression and the cost upstream estimates for it (its ``expectCost``).
dralet's estimate must be the same number, so that ``dralet validate`` refuses exactly the
selectors kube-apiserver refuses as "too complex, exceeds cost limit".

Source: kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/
compile_test.go at v1.37.2 (module k8s.io/dynamic-resource-allocation v0.37.2;
``testcases``, every case with an ``expectCost``). Case names
are upstream's; ``maxElementsListTypeEnabled`` there is 64.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.upstream_agreement import Verdict, record

from dralet.allocation import cel, celcost

TABLE = "cel compile_test.go costs"
A = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
EXPENSIVE = (
    "".join(f"{TEN}.all({var}, " for var in ("x", "y", "z", "z2", "z3", "z4", "z5"))
    + "int('1'.find('[0-9]*')) < 100"
    + ")" * 7
)
"""Seven nested macros over ten-element lists (upstream's "expensive" case)."""


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    cost: int
    consumable: bool = False
    """The case runs with DRAConsumableCapacity on (``device.allowMultipleAllocations``)."""


CASES = [
    Case(
        "runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        6,
    ),
    Case(
        "runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        6,
    ),
    Case("domain-check-negative", '"no-such-domain" in device.attributes', 3),
    Case("domain-check-positive", '"dra.example.com" in device.attributes', 3),
    Case("empty-driver-name", 'device.driver == ""', 2),
    Case("real-driver-name", 'device.driver == "dra.example.com"', 4),
    Case("driver-name-qualifier", f"{A}.name", 4),
    Case("driver-name-qualifier-map-lookup", f'{A}["name"]', 4),
    Case("bind", f"cel.bind(dra, {A}, dra.name)", 15),
    Case("qualified-attribute-name", 'device.attributes["other.example.com"].name', 4),
    Case("bool", f"{A}.name", 4),
    Case("int", f"{A}.name > 0", 5),
    Case("string", f'{A}.name == "fish"', 5),
    Case("macro-exists-on-int", f"{A}.name.exists(x, x > 0)", 389),
    Case(
        "macro-exists-on-bool",
        f"{A}.name.exists(x, x == true)",
        389,
    ),
    Case(
        "macro-exists-on-string",
        f'{A}.name.exists(x, x == "fish")',
        389,
    ),
    Case("list-result-type-causes-match-error", f"{A}.names", 4),
    Case(
        "includes-function-can-evaluate",
        f'{A}.name.includes("fish")',
        68,
    ),
    Case("list-of-bool", f"{A}.names.size() == 2", 6),
    Case("list-of-int", f"{A}.names.size() == 2", 6),
    Case("list-of-string", f"{A}.names.size() == 2", 6),
    Case("list-of-semver", f"{A}.names.size() == 2", 6),
    Case("macro-on-list-of-int", f"{A}.names.exists(x, x > 0)", 389),
    Case("macro-on-list-of-string", f'{A}.names.all(x, x != "")', 261),
    Case(
        "macro-on-list-of-semver",
        f'{A}.names.all(x, x.isGreaterThan(semver("0.0.1")))',
        389,
    ),
    Case(
        "includes-function-compilation-and-eval-success",
        f'{A}.attr.includes("fish")',
        68,
    ),
    Case(
        "includes-function-on-bool-scalar-positive",
        f"{A}.name.includes(true)",
        68,
    ),
    Case(
        "includes-function-on-bool-scalar-negative",
        f"{A}.name.includes(true)",
        68,
    ),
    Case(
        "includes-function-on-bool-list-positive",
        f"{A}.name.includes(true)",
        68,
    ),
    Case(
        "includes-function-on-bool-list-negative",
        f"{A}.name.includes(false)",
        68,
    ),
    Case(
        "includes-function-on-int-scalar-positive",
        f"{A}.name.includes(1)",
        68,
    ),
    Case(
        "includes-function-on-int-scalar-negative",
        f"{A}.name.includes(1)",
        68,
    ),
    Case(
        "includes-function-on-int-list-positive",
        f"{A}.name.includes(1)",
        68,
    ),
    Case(
        "includes-function-on-int-list-negative",
        f"{A}.name.includes(3)",
        68,
    ),
    Case(
        "includes-function-on-string-scalar-positive",
        f'{A}.name.includes("fish")',
        68,
    ),
    Case(
        "includes-function-on-string-scalar-negative",
        f'{A}.name.includes("bird")',
        68,
    ),
    Case(
        "includes-function-on-string-list-positive",
        f'{A}.name.includes("fish")',
        68,
    ),
    Case(
        "includes-function-on-string-list-negative",
        f'{A}.name.includes("cat")',
        68,
    ),
    Case(
        "includes-function-on-semver-scalar-positive",
        f'{A}.name.includes(semver("1.0.0"))',
        69,
    ),
    Case(
        "includes-function-on-semver-scalar-negative",
        f'{A}.name.includes(semver("2.0.0"))',
        69,
    ),
    Case(
        "includes-function-on-semver-list-positive",
        f'{A}.name.includes(semver("1.0.0"))',
        69,
    ),
    Case(
        "includes-function-on-semver-list-negative",
        f'{A}.name.includes(semver("3.0.0"))',
        69,
    ),
    Case(
        "includes-function-on-very-long-list-positive",
        f'{A}.name.includes("value-48")',
        68,
    ),
    Case("in-operator-on-list", f"1 in {A}.names", 68),
    Case("version", f'{A}.name.isGreaterThan(semver("0.0.1"))', 6),
    Case(
        "version_v",
        f'{A}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        7,
    ),
    Case(
        "macro-exists-on-version",
        f'{A}.name.exists(x, x.isGreaterThan(semver("0.0.1")))',
        453,
    ),
    Case("quantity", f'{C}.name.isGreaterThan(quantity("1Ki"))', 6),
    Case(
        "check-positive",
        f'"name" in {C} && {C}.name.isGreaterThan(quantity("1Ki"))',
        10,
    ),
    Case(
        "check-negative",
        f'!("name" in {C}) || {C}.name.isGreaterThan(quantity("1Ki"))',
        11,
    ),
    Case(
        "all",
        "\n"
        + " &&\n".join(
            [
                f'{C}.quantity.isGreaterThan(quantity("1Ki"))',
                f"{A}.bool",
                f"{A}.int > 0",
                f'{A}.string == "fish"',
                f'{A}.version.isGreaterThan(semver("0.0.1"))',
                f'{C}["quantity"].isGreaterThan(quantity("1Ki"))',
                f'{A}["bool"]',
                f'{A}["int"] > 0',
                f'{A}["string"] == "fish"',
                f'{A}["version"].isGreaterThan(semver("0.0.1"))',
            ]
        )
        + "\n",
        52,
    ),
    Case(
        "many",
        f"{A}.a && {A}.b && {A}.c",
        12,
    ),
    Case("check_attribute_domains", 'device.attributes.exists_one(x, x == "dra.example.com")', 164),
    Case(
        "check_attribute_ids",
        f'{A}.exists_one(x, x == "services")',
        133,
    ),
    Case(
        "split_attribute",
        f'{A}.services.split("example").size() >= 2',
        19,
    ),
    Case("regexp_attribute", f'{A}.services.matches("[^a]?sym")', 18),
    Case("check_capacity_domains", 'device.capacity.exists_one(x, x == "dra.example.com")', 164),
    Case("check_capacity_ids", f'{C}.exists_one(x, x == "memory")', 133),
    Case(
        "expensive",
        EXPENSIVE,
        85555551,
    ),
    Case(
        "allow_multiple_allocations", "device.allowMultipleAllocations == true", 3, consumable=True
    ),
    Case(
        "allow_multiple_allocations_default",
        "device.allowMultipleAllocations == false",
        3,
        consumable=True,
    ),
    Case(
        "allow_multiple_allocations_false",
        "device.allowMultipleAllocations == false",
        3,
        consumable=True,
    ),
    Case(
        "allow_multiple_allocations_new",
        "device.allowMultipleAllocations == false",
        3,
        consumable=True,
    ),
    Case(
        "allow_multiple_allocations_enabled",
        "device.allowMultipleAllocations == false",
        3,
        consumable=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_upstream_cost_case(case: Case) -> None:
    engine = cel.CelEngine(list_type_attributes=True, consumable_capacity=case.consumable)
    got = engine.compile(case.expression).max_cost()
    agrees = got == case.cost
    record(Verdict(TABLE, case.name, agrees))
    assert agrees, f"upstream estimates {case.cost}; dralet {got}"


def test_the_expensive_case_is_over_the_limit() -> None:
    expensive = next(c for c in CASES if c.name == "expensive")
    assert expensive.cost > celcost.MAX_COST
