"""The 1.36+ allocation features, each as a small table of cases with exact outcomes:
shared counters (partitionable devices), device taints and tolerations, consumable
capacity (shares, request policies, distinctAttribute), binding conditions and
per-device node selection; and the same inputs on 1.35, where these gates are off.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import pytest
from tests.allocation.test_allocation_cases import DRIVER, claim, dclass, dev, node, req

from dralet.allocation import allocator, manifests, simulation
from dralet.allocation.features import Features

Object = dict[str, Any]
GI = 2**30


def slice_(
    name: str,
    devices: list[Object],
    *,
    count: int = 1,
    pool: str = "pool-a",
    counters: dict[str, dict[str, str]] | None = None,
    spec: Object | None = None,
) -> Object:
    body: Object = {
        "driver": DRIVER,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
        "nodeName": "node-a",
        **(spec or {}),
    }
    if devices:
        body["devices"] = devices
    if counters is not None:
        body["sharedCounters"] = [
            {"name": set_name, "counters": {k: {"value": v} for k, v in values.items()}}
            for set_name, values in counters.items()
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def part(name: str, memory: str, **extra: Any) -> Object:
    """A partition of GPU 0: consumes ``memory`` of counter set gpu-0."""
    return {
        **dev(name),
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}],
        **extra,
    }


def shared(name: str, memory: str = "8Gi", policy: Object | None = None, **attrs: Any) -> Object:
    capacity: Object = {"value": memory}
    if policy is not None:
        capacity["requestPolicy"] = policy
    return {
        **dev(name, **attrs),
        "allowMultipleAllocations": True,
        "capacity": {"memory": capacity},
    }


def wants(memory: str, name: str = "r", **fields: Any) -> Object:
    return {**req(name, **fields), "capacity": {"requests": {"memory": memory}}}


def taint(key: str, effect: str, value: str | None = None) -> Object:
    out: Object = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


def rule(name: str, selector: Object | None, taint_: Object) -> Object:
    """A DeviceTaintRule (v1, 1.37); ``selector`` None leaves out deviceSelector."""
    spec: Object = {"taint": taint_}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


COUNTER_SLICE = slice_("counters", [], counters={"gpu-0": {"memory": "8Gi"}}, count=2)
PARTS = slice_(
    "parts", [part("full", "8Gi"), part("half-a", "4Gi"), part("half-b", "4Gi")], count=2
)
POLICY = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}


@dataclass(frozen=True)
class Case:
    id: str
    objects: list[Object]
    expected: Any
    """For each claim in input order: its devices, "unschedulable" or ("error", text)."""
    release: str = "1.37"
    node: str | None = None


CASES = [
    # --- shared counters -----------------------------------------------------------
    Case(
        "counters-a-whole-gpu-leaves-no-partition",
        [dclass(), COUNTER_SLICE, PARTS, claim("one", req()), claim("two", req())],
        [["full"], "unschedulable"],
    ),
    Case(
        "counters-backtrack-to-two-halves",
        [dclass(), COUNTER_SLICE, PARTS, claim("c", req(count=2))],
        [["half-a", "half-b"]],
    ),
    Case(
        "counters-used-by-an-allocated-claim",
        [
            dclass(),
            COUNTER_SLICE,
            PARTS,
            claim("held", req(), allocated=[("r", "pool-a", "half-b", False)]),
            claim("c", req(count=2)),
        ],
        ["already", "unschedulable"],
    ),
    Case(
        "counters-one-half-still-fits-beside-a-held-half",
        [
            dclass(),
            COUNTER_SLICE,
            PARTS,
            claim("held", req(), allocated=[("r", "pool-a", "half-b", False)]),
            claim("c", req()),
        ],
        ["already", ["half-a"]],
    ),
    Case(
        "counters-off-before-1.36",
        [dclass(), COUNTER_SLICE, PARTS, claim("c", req())],
        ["unschedulable"],
        release="1.35",
    ),
    Case(
        "counters-unknown-set-makes-the-pool-invalid",
        [
            dclass(),
            slice_("parts", [part("full", "8Gi")], counters={"gpu-1": {"memory": "8Gi"}}),
            claim("c", req()),
        ],
        [("error", "pool gpu.example.com/pool-a is invalid: counter set gpu-0 not found")],
    ),
    # --- taints ----------------------------------------------------------------------
    Case(
        "taint-noschedule-skips-the-device",
        [
            dclass(),
            slice_(
                "s", [{**dev("gpu-0"), "taints": [taint("broken", "NoSchedule")]}, dev("gpu-1")]
            ),
            claim("c", req()),
        ],
        [["gpu-1"]],
    ),
    Case(
        "taint-noexecute-with-value-not-tolerated-by-another-value",
        [
            dclass(),
            slice_("s", [{**dev("gpu-0"), "taints": [taint("k", "NoExecute", "a")]}]),
            claim("c", {**req(), "tolerations": [{"key": "k", "operator": "Equal", "value": "b"}]}),
        ],
        ["unschedulable"],
    ),
    Case(
        "taint-tolerated-by-exists",
        [
            dclass(),
            slice_("s", [{**dev("gpu-0"), "taints": [taint("k", "NoSchedule", "a")]}]),
            claim("c", {**req(), "tolerations": [{"key": "k", "operator": "Exists"}]}),
        ],
        [["gpu-0"]],
    ),
    Case(
        "taint-effect-none-is-informational",
        [
            dclass(),
            slice_("s", [{**dev("gpu-0"), "taints": [taint("k", "None")]}]),
            claim("c", req()),
        ],
        [["gpu-0"]],
    ),
    Case(
        "taint-ignored-before-1.36",
        [
            dclass(),
            slice_("s", [{**dev("gpu-0"), "taints": [taint("k", "NoSchedule")]}]),
            claim("c", req()),
        ],
        [["gpu-0"]],
        release="1.35",
    ),
    # --- DeviceTaintRules ----------------------------------------------------------------
    Case(
        "taint-rule-keeps-its-device-from-untolerating-requests",
        [
            dclass(),
            slice_("s", [dev("gpu-0"), dev("gpu-1")]),
            rule("drain-gpu-0", {"device": "gpu-0"}, taint("drain", "NoSchedule")),
            claim("one", req()),
            claim("two", req()),
        ],
        [["gpu-1"], "unschedulable"],
    ),
    Case(
        "taint-rule-by-driver-and-pool-taints-the-pool",
        [
            dclass(),
            slice_("s", [dev("gpu-0"), dev("gpu-1")]),
            rule("maintenance", {"driver": DRIVER, "pool": "pool-a"}, taint("m", "NoExecute")),
            claim("c", req()),
        ],
        ["unschedulable"],
    ),
    Case(
        "taint-rule-of-another-pool-taints-nothing-here",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            rule("elsewhere", {"pool": "pool-b"}, taint("m", "NoExecute")),
            claim("c", req()),
        ],
        [["gpu-0"]],
    ),
    Case(
        "taint-rule-empty-selector-taints-every-device",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            rule("all", {}, taint("m", "NoSchedule")),
            claim("c", req()),
        ],
        ["unschedulable"],
    ),
    Case(
        "taint-rule-without-selector-taints-nothing",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            rule("none", None, taint("m", "NoSchedule")),
            claim("c", req()),
        ],
        [["gpu-0"]],
    ),
    Case(
        "taint-rule-tolerated",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            rule("all", {}, taint("m", "NoSchedule", "x")),
            claim("c", {**req(), "tolerations": [{"key": "m", "operator": "Equal", "value": "x"}]}),
        ],
        [["gpu-0"]],
    ),
    Case(
        "taint-rule-off-by-default-in-1.36",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            rule("all", {}, taint("m", "NoSchedule")),
            claim("c", req()),
        ],
        [["gpu-0"]],
        release="1.36",
    ),
    # --- consumable capacity -----------------------------------------------------------
    Case(
        "shares-until-the-capacity-is-used",
        [
            dclass(),
            slice_("s", [shared("gpu-0", policy=POLICY), shared("gpu-1", policy=POLICY)]),
            claim("a", wants("3Gi")),
            claim("b", wants("4Gi")),
            claim("c", wants("2Gi")),
        ],
        [["gpu-0"], ["gpu-0"], ["gpu-1"]],
    ),
    Case(
        "share-without-a-request-takes-the-default",
        [
            dclass(),
            slice_("s", [shared("gpu-0", policy=POLICY)]),
            *(claim(f"c{i}", req()) for i in range(9)),
        ],
        [["gpu-0"]] * 8 + ["unschedulable"],
    ),
    Case(
        "share-without-a-policy-takes-everything",
        [
            dclass(),
            slice_("s", [shared("gpu-0")]),
            claim("a", req()),
            claim("b", req()),
        ],
        [["gpu-0"], "unschedulable"],
    ),
    Case(
        "request-above-the-range-maximum",
        [
            dclass(),
            slice_("s", [shared("gpu-0", "16Gi", policy=POLICY)]),
            claim("c", wants("9Gi")),
        ],
        ["unschedulable"],
    ),
    Case(
        "request-for-a-capacity-the-device-lacks",
        [
            dclass(),
            slice_("s", [dev("gpu-0")]),
            claim("c", wants("1Gi")),
        ],
        ["unschedulable"],
    ),
    Case(
        "capacity-request-filters-exclusive-devices",
        [
            dclass(),
            slice_(
                "s",
                [dev("small", capacity={"memory": "1Gi"}), dev("big", capacity={"memory": "4Gi"})],
            ),
            claim("c", wants("2Gi")),
        ],
        [["big"]],
    ),
    Case(
        "two-requests-of-one-claim-share-a-device",
        [
            dclass(),
            slice_("s", [shared("gpu-0", policy=POLICY), shared("gpu-1", policy=POLICY)]),
            claim("c", wants("1Gi", "a"), wants("1Gi", "b")),
        ],
        [["gpu-0", "gpu-0"]],
    ),
    Case(
        "distinct-attribute-spreads-the-shares",
        [
            dclass(),
            slice_(
                "s",
                [shared("gpu-0", policy=POLICY, numa=0), shared("gpu-1", policy=POLICY, numa=1)],
            ),
            {
                **claim("c", wants("1Gi", "a"), wants("1Gi", "b")),
            },
        ],
        [["gpu-0", "gpu-1"]],
    ),
    Case(
        "shares-are-whole-devices-before-1.36",
        [
            dclass(),
            slice_("s", [shared("gpu-0", policy=POLICY), shared("gpu-1", policy=POLICY)]),
            claim("a", req()),
            claim("b", req()),
            claim("c", req()),
        ],
        [["gpu-0"], ["gpu-1"], "unschedulable"],
        release="1.35",
    ),
    # --- binding conditions and per-device node selection ----------------------------------
    Case(
        "pools-with-binding-conditions-come-last",
        [
            dclass(),
            slice_("a", [{**dev("fabric-0"), "bindingConditions": ["Attached"]}], pool="pool-a"),
            slice_("b", [dev("gpu-0")], pool="pool-b"),
            claim("one", req()),
            claim("two", req()),
        ],
        [["gpu-0"], ["fabric-0"]],
    ),
    Case(
        "binding-conditions-off-before-1.36",
        [
            dclass(),
            slice_("a", [{**dev("fabric-0"), "bindingConditions": ["Attached"]}]),
            claim("c", req()),
        ],
        ["unschedulable"],
        release="1.35",
    ),
    Case(
        "per-device-node-selection",
        [
            dclass(),
            node("node-a"),
            node("node-b"),
            slice_(
                "s",
                [{**dev("on-a"), "nodeName": "node-a"}, {**dev("on-b"), "nodeName": "node-b"}],
                spec={"nodeName": None, "perDeviceNodeSelection": True},
            ),
            claim("c", req()),
        ],
        [["on-b"]],
        node="node-b",
    ),
]


def _distinct(case: Case) -> Case:
    """The distinctAttribute case's claim gets its constraint here (the helper has no
    parameter for it)."""
    if case.id != "distinct-attribute-spreads-the-shares":
        return case
    claim_obj = case.objects[-1]
    claim_obj["spec"]["devices"]["constraints"] = [
        {"requests": ["a", "b"], "distinctAttribute": f"{DRIVER}/numa"}
    ]
    return case


def _outcomes(case: Case) -> list[simulation.ClaimOutcome]:
    for obj in case.objects:
        spec = obj.get("spec", {})
        if spec.get("nodeName", "") is None:
            del spec["nodeName"]
    settings = allocator.AllocatorSettings(
        all_mode_needs_a_device=True, features=Features.for_release(case.release)
    )
    inputs = manifests.decode_objects(case.objects)
    report = simulation.simulate(
        inputs, node_name=case.node, settings=simulation.SimulationSettings(allocator=settings)
    )
    return list(report.outcomes)


@pytest.mark.parametrize("case", [_distinct(c) for c in CASES], ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    outcomes = _outcomes(case)
    got: list[Any] = []
    for outcome in outcomes:
        if outcome.status == "already-allocated":
            got.append("already")
        elif outcome.status == "unschedulable":
            got.append("unschedulable")
        elif outcome.status == "error":
            got.append(("error", outcome.error))
        else:
            assert outcome.allocation is not None
            got.append([r.device for r in outcome.allocation.results])
    assert got == case.expected


def _results_of(case: Case) -> list[Any]:
    return [r for o in _outcomes(case) if o.allocation is not None for r in o.allocation.results]


def _results(case_id: str) -> list[Any]:
    return _results_of(next(c for c in CASES if c.id == case_id))


def test_shares_carry_a_share_id_and_the_rounded_consumed_capacity() -> None:
    results = _results("shares-until-the-capacity-is-used")
    assert [r.consumed_capacity for r in results] == [
        {"memory": Fraction(3 * GI)},
        {"memory": Fraction(4 * GI)},
        {"memory": Fraction(2 * GI)},
    ]
    assert len({r.share_id for r in results}) == 3 and None not in {r.share_id for r in results}
    api = results[0].to_api()
    assert api["consumedCapacity"] == {"memory": str(3 * GI)} and "shareID" in api


@pytest.mark.parametrize(
    ("policy", "asked", "consumed"),
    [
        (POLICY, "1500Mi", 2 * GI),  # up to the next 1Gi step
        (POLICY, "1", GI),  # below the minimum: the minimum
        ({"validValues": ["2", "4", "8"]}, "3", 4),  # up to the next valid value
        ({"default": "2", "validValues": ["4", "8"]}, None, 2),  # nothing asked: the default
    ],
)
def test_requests_round_up_to_the_policy(policy: Object, asked: str | None, consumed: int) -> None:
    request = req() if asked is None else wants(asked)
    objects = [dclass(), slice_("s", [shared("gpu-0", "16Gi", policy=policy)]), claim("c", request)]
    (result,) = _results_of(Case("rounding", objects, None))
    assert result.consumed_capacity == {"memory": Fraction(consumed)}


def test_tolerations_and_binding_conditions_reach_the_results() -> None:
    tolerated = _results("taint-tolerated-by-exists")
    assert tolerated[0].to_api()["tolerations"] == [{"key": "k", "operator": "Exists"}]
    bound = _results("pools-with-binding-conditions-come-last")
    assert bound[1].binding_conditions == ("Attached",)
    assert bound[1].to_api()["bindingConditions"] == ["Attached"]


def test_binds_to_node_pins_the_claim_to_the_node() -> None:
    objects = [
        dclass(),
        node("node-a"),
        slice_(
            "s",
            [{**dev("fabric-0"), "bindingConditions": ["Attached"], "bindsToNode": True}],
            spec={"nodeName": None, "allNodes": True},
        ),
        claim("c", req()),
    ]
    (outcome,) = _outcomes(Case("binds", objects, None, node="node-a"))
    assert outcome.allocation is not None and outcome.allocation.node_selector is not None
    assert outcome.allocation.node_selector.to_api() == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    }


def test_features_follow_the_release() -> None:
    assert Features.for_release("1.35") == Features()
    assert Features.for_release("1.36") == replace(Features.all_on(), device_taint_rules=False)
    assert Features.for_release("1.37") == Features.all_on()


def test_explain_names_the_rule_behind_a_taint() -> None:
    objects = [
        dclass(),
        slice_("s", [dev("gpu-0")]),
        rule("drain-gpu-0", {"device": "gpu-0"}, taint("drain", "NoSchedule")),
        claim("c", req()),
    ]
    settings = allocator.AllocatorSettings(features=Features.for_release("1.37"))
    report = simulation.simulate(
        manifests.decode_objects(objects),
        node_name=None,
        explain=True,
        settings=simulation.SimulationSettings(allocator=settings),
    )
    (outcome,) = report.outcomes
    (on_node,) = outcome.explanations
    reasons = [r.reason for r in on_node.rejections]
    assert any("tainted drain:NoSchedule (DeviceTaintRule drain-gpu-0)" in r for r in reasons), (
        reasons
    )
