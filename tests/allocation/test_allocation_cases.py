"""A table of allocation cases, each with its exact expected devices, no-fit or error.

Manifests are built in both shapes: v1beta1 (1.32: device fields under ``basic``,
flat requests) and v1 (flat device, ``exactly`` / ``firstAvailable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from dralet.allocation import allocator, manifests, simulation

DRIVER = "gpu.example.com"
Object = dict[str, Any]


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, bool):
            out[name] = {"bool": value}
        elif isinstance(value, int):
            out[name] = {"int": value}
        elif value.count(".") == 2 and value[0].isdigit():
            out[name] = {"version": value}
        else:
            out[name] = {"string": value}
    return out


def dev(name: str, *, capacity: dict[str, str] | None = None, **attributes: Any) -> Object:
    return {
        "name": name,
        "attributes": _attributes(attributes),
        "capacity": {k: {"value": v} for k, v in (capacity or {}).items()},
    }


def rslice(
    name: str,
    devices: Sequence[Object],
    *,
    pool: str = "pool-a",
    node: str | None = "node-a",
    generation: int = 1,
    count: int = 1,
    labels: dict[str, str] | None = None,
    all_nodes: bool = False,
    version: str = "v1",
    driver: str = DRIVER,
) -> Object:
    spec: Object = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    if all_nodes:
        spec["allNodes"] = True
    elif labels is not None:
        spec["nodeSelector"] = {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": k, "operator": "In", "values": [v]} for k, v in labels.items()
                    ]
                }
            ]
        }
    else:
        spec["nodeName"] = node
    if version == "v1beta1":
        devices = [
            {"name": d["name"], "basic": {"attributes": d["attributes"], "capacity": d["capacity"]}}
            if "attributes" in d
            else d
            for d in devices
        ]
    spec["devices"] = list(devices)
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def dclass(name: str = "gpu", *selectors: str, version: str = "v1") -> Object:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": s}} for s in selectors]},
    }


def req(
    name: str = "r",
    *selectors: str,
    cls: str = "gpu",
    mode: str | None = None,
    count: int | None = None,
    admin: bool | None = None,
) -> Object:
    fields: Object = {"deviceClassName": cls}
    if selectors:
        fields["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if mode is not None:
        fields["allocationMode"] = mode
    if count is not None:
        fields["count"] = count
    if admin is not None:
        fields["adminAccess"] = admin
    return {"name": name, **fields}


def first(name: str, *subs: Object) -> Object:
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: Object,
    constraints: Sequence[Object] = (),
    allocated: Sequence[tuple[str, str, str, bool]] = (),
    version: str = "v1",
) -> Object:
    shaped = []
    for request in requests:
        if version == "v1beta1" or "firstAvailable" in request:
            shaped.append(request)
        else:
            body = {k: v for k, v in request.items() if k != "name"}
            shaped.append({"name": request["name"], "exactly": body})
    obj: Object = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": shaped, "constraints": list(constraints)}},
    }
    if allocated:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": DRIVER, "pool": p, "device": d, "adminAccess": a}
                        for r, p, d, a in allocated
                    ]
                }
            }
        }
    return obj


def node(name: str, **labels: str) -> Object:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def match(attribute: str, *requests: str) -> Object:
    return {"matchAttribute": attribute, "requests": list(requests)}


A100 = f'device.attributes["{DRIVER}"].model == "A100"'
TWO_GPUS = [dev("gpu-0", model="A100", numa=0), dev("gpu-1", model="A100", numa=1)]
NUMA = f"{DRIVER}/numa"


@dataclass(frozen=True)
class Case:
    id: str
    objects: list[Object]
    expected: Any
    """For the last claim: [(request, pool, device)], "unschedulable", or ("error", message)."""
    node: str | None = None
    settings: allocator.AllocatorSettings = field(default_factory=allocator.AllocatorSettings)
    expected_node: str | None = None
    admin: bool = False


def only_gpu_class(*objects: Object) -> list[Object]:
    return [dclass(), *objects]


CASES = [
    Case(
        "exact-count-one-v1",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req())),
        [("r", "pool-a", "gpu-0")],
        expected_node="node-a",
    ),
    Case(
        "exact-count-one-v1beta1-basic",
        [
            dclass(version="v1beta1"),
            rslice("s", TWO_GPUS, version="v1beta1"),
            claim("c", req(), version="v1beta1"),
        ],
        [("r", "pool-a", "gpu-0")],
    ),
    Case(
        "exact-count-two",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req(count=2))),
        [("r", "pool-a", "gpu-0"), ("r", "pool-a", "gpu-1")],
    ),
    Case(
        "count-more-than-available",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req(count=3))),
        "unschedulable",
    ),
    Case(
        "all-mode-takes-every-match-v1beta1",
        [
            dclass(version="v1beta1"),
            rslice("s", [*TWO_GPUS, dev("gpu-2", model="H100")], version="v1beta1"),
            claim("c", req("r", A100, mode="All"), version="v1beta1"),
        ],
        [("r", "pool-a", "gpu-0"), ("r", "pool-a", "gpu-1")],
    ),
    Case(
        "all-mode-one-in-use-no-fit",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("other", req(), allocated=[("r", "pool-a", "gpu-1", False)]),
            claim("c", req(mode="All")),
        ),
        "unschedulable",
    ),
    Case(
        "all-mode-nothing-matches-1.32-allocates-none",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req("r", "false", mode="All"))),
        [],
    ),
    Case(
        "all-mode-nothing-matches-1.33-no-fit",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req("r", "false", mode="All"))),
        "unschedulable",
        settings=allocator.AllocatorSettings(all_mode_needs_a_device=True),
    ),
    Case(
        "class-selector-filters",
        [
            dclass("gpu", A100),
            rslice("s", [dev("gpu-0", model="H100"), dev("gpu-1", model="A100")]),
            claim("c", req()),
        ],
        [("r", "pool-a", "gpu-1")],
    ),
    Case(
        "request-selector-filters-capacity",
        only_gpu_class(
            rslice(
                "s",
                [
                    dev("gpu-0", capacity={"memory": "40Gi"}),
                    dev("gpu-1", capacity={"memory": "80Gi"}),
                ],
            ),
            claim(
                "c", req("r", f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("64Gi"))')
            ),
        ),
        [("r", "pool-a", "gpu-1")],
    ),
    Case(
        "class-and-request-selectors-both-needed",
        [
            dclass("gpu", A100),
            rslice("s", [dev("gpu-0", model="H100", numa=1), dev("gpu-1", model="A100", numa=0)]),
            claim("c", req("r", f'device.attributes["{DRIVER}"].numa == 1')),
        ],
        "unschedulable",
    ),
    Case(
        "constraint-across-requests-backtracks",
        only_gpu_class(
            rslice("s", [dev("gpu-0", numa=0), dev("gpu-1", numa=1), dev("gpu-2", numa=1)]),
            claim("c", req("a"), req("b"), constraints=[match(NUMA)]),
        ),
        [("a", "pool-a", "gpu-1"), ("b", "pool-a", "gpu-2")],
    ),
    Case(
        "constraint-only-on-listed-requests",
        only_gpu_class(
            rslice("s", [dev("gpu-0", numa=0), dev("gpu-1", numa=1), dev("gpu-2", numa=1)]),
            claim("c", req("a"), req("b"), req("free"), constraints=[match(NUMA, "a", "b")]),
        ),
        [("a", "pool-a", "gpu-1"), ("b", "pool-a", "gpu-2"), ("free", "pool-a", "gpu-0")],
    ),
    Case(
        "constraint-skips-device-without-attribute",
        only_gpu_class(
            rslice("s", [dev("gpu-0"), dev("gpu-1", numa=4), dev("gpu-2", numa=4)]),
            claim("c", req("a"), req("b"), constraints=[match(NUMA)]),
        ),
        [("a", "pool-a", "gpu-1"), ("b", "pool-a", "gpu-2")],
    ),
    Case(
        "constraint-unqualified-attribute-in-driver-domain-matches-qualified-name",
        only_gpu_class(
            rslice("s", [dev("gpu-0", **{NUMA: 2}), dev("gpu-1", numa=2)]),
            claim("c", req("a"), req("b"), constraints=[match(NUMA)]),
        ),
        [("a", "pool-a", "gpu-0"), ("b", "pool-a", "gpu-1")],
    ),
    Case(
        "constraint-type-must-match-too",
        only_gpu_class(
            rslice("s", [dev("gpu-0", numa=1), dev("gpu-1", numa="1")]),
            claim("c", req("a"), req("b"), constraints=[match(NUMA)]),
        ),
        "unschedulable",
    ),
    Case(
        "constraint-violated-in-all-mode-is-an-error",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("c", req("r", mode="All"), constraints=[match(NUMA)]),
        ),
        (
            "error",
            "claim default/c, request r: cannot add device gpu.example.com/pool-a/gpu-1 "
            "because a claim constraint would not be satisfied",
        ),
    ),
    Case(
        "incomplete-pool-still-used-for-exact-count",
        only_gpu_class(rslice("s", TWO_GPUS, count=2), claim("c", req())),
        [("r", "pool-a", "gpu-0")],
    ),
    Case(
        "incomplete-pool-refused-for-all",
        only_gpu_class(rslice("s", TWO_GPUS, count=2), claim("c", req(mode="All"))),
        (
            "error",
            "claim default/c, request r: asks for all devices, but resource pool "
            "gpu.example.com/pool-a is currently being updated",
        ),
    ),
    Case(
        "stale-generation-ignored",
        only_gpu_class(
            rslice("old", [dev("old-0")], generation=1),
            rslice("new", [dev("new-0")], generation=2),
            claim("c", req()),
        ),
        [("r", "pool-a", "new-0")],
    ),
    Case(
        "stale-generation-devices-do-not-count",
        only_gpu_class(
            rslice("old", [dev("old-0")], generation=3),
            rslice("new", [dev("new-0")], generation=4),
            claim("c", req(count=2)),
        ),
        "unschedulable",
    ),
    Case(
        "multi-slice-pool-slices-by-name",
        only_gpu_class(
            rslice("slice-b", [dev("b-0")], count=2),
            rslice("slice-a", [dev("a-0")], count=2),
            claim("c", req(count=2)),
        ),
        [("r", "pool-a", "a-0"), ("r", "pool-a", "b-0")],
    ),
    Case(
        "pools-by-driver-then-name",
        [
            dclass("gpu"),
            rslice("s1", [dev("z-0")], pool="pool-z"),
            rslice("s2", [dev("x-0")], pool="pool-x", driver="aaa.example.com"),
            rslice("s3", [dev("a-0")], pool="pool-a"),
            claim("c", req(count=2)),
        ],
        [("r", "pool-x", "x-0"), ("r", "pool-a", "a-0")],
    ),
    Case(
        "duplicate-device-name-makes-pool-invalid",
        only_gpu_class(
            rslice("s1", [dev("gpu-0")], count=2),
            rslice("s2", [dev("gpu-0")], count=2),
            claim("c", req()),
        ),
        ("error", "pool gpu.example.com/pool-a is invalid: duplicate device name gpu-0"),
    ),
    Case(
        "already-allocated-device-excluded",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("other", req(), allocated=[("r", "pool-a", "gpu-0", False)]),
            claim("c", req()),
        ),
        [("r", "pool-a", "gpu-1")],
    ),
    Case(
        "admin-access-result-holds-no-device",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("monitor", req(), allocated=[("r", "pool-a", "gpu-0", True)]),
            claim("c", req()),
        ),
        [("r", "pool-a", "gpu-0")],
    ),
    Case(
        "admin-access-may-use-allocated-device",
        only_gpu_class(
            rslice("s", [dev("gpu-0")]),
            claim("other", req(), allocated=[("r", "pool-a", "gpu-0", False)]),
            claim("c", req(admin=True)),
        ),
        [("r", "pool-a", "gpu-0")],
        admin=True,
    ),
    Case(
        "admin-access-never-reuses-a-device-within-one-claim",
        only_gpu_class(
            rslice("s", [dev("gpu-0")]),
            claim("c", req("a", admin=True), req("b", admin=True)),
        ),
        "unschedulable",
    ),
    Case(
        "admin-access-two-requests-get-two-devices",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("other", req(), allocated=[("r", "pool-a", "gpu-0", False)]),
            claim("c", req("a", admin=True), req("b", admin=True)),
        ),
        [("a", "pool-a", "gpu-0"), ("b", "pool-a", "gpu-1")],
        admin=True,
    ),
    Case(
        "over-the-claim-limit-is-an-error-even-when-every-device-is-in-use",
        only_gpu_class(
            rslice("s", [dev("gpu-0")]),
            claim("other", req(), allocated=[("r", "pool-a", "gpu-0", False)]),
            claim("c", req(count=40)),
        ),
        (
            "error",
            "claim default/c: number of requested devices 40 exceeds the claim limit of 32 "
            "(AllocationResultsMaxSize)",
        ),
    ),
    Case(
        "admin-access-gate-off-is-an-error",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req(admin=True))),
        (
            "error",
            "claim default/c, request r: admin access is requested, but the feature is disabled",
        ),
        settings=allocator.AllocatorSettings(admin_access_enabled=False),
    ),
    Case(
        "node-selector-slice-picks-matching-node",
        [
            dclass("gpu"),
            node("n1", rack="r1"),
            node("n2", rack="r2"),
            rslice("s", [dev("gpu-0")], labels={"rack": "r2"}),
            claim("c", req()),
        ],
        [("r", "pool-a", "gpu-0")],
        expected_node="n2",
    ),
    Case(
        "given-node-sees-no-devices",
        only_gpu_class(rslice("s", TWO_GPUS, node="node-a"), claim("c", req())),
        "unschedulable",
        node="node-b",
    ),
    Case(
        "all-nodes-slice-on-given-node",
        only_gpu_class(rslice("s", TWO_GPUS, all_nodes=True), claim("c", req())),
        [("r", "pool-a", "gpu-0")],
        node="anywhere",
        expected_node="anywhere",
    ),
    Case(
        "first-node-full-second-node-chosen",
        only_gpu_class(
            rslice("a", [dev("gpu-0")], pool="node-a", node="node-a"),
            rslice("b", [dev("gpu-0")], pool="node-b", node="node-b"),
            claim("first", req()),
            claim("c", req()),
        ),
        [("r", "node-b", "gpu-0")],
        expected_node="node-b",
    ),
    Case(
        "missing-attribute-is-a-runtime-error",
        only_gpu_class(
            rslice("s", [dev("gpu-0", model="A100")]),
            claim("c", req("r", f'device.attributes["{DRIVER}"].family == "ampere"')),
        ),
        ("error", "claim default/c: selector #0: CEL runtime error: no such key: family"),
    ),
    Case(
        "class-selector-runtime-error",
        [
            dclass("gpu", f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("1Gi"))'),
            rslice("s", [dev("gpu-0")]),
            claim("c", req()),
        ],
        ("error", "class gpu: selector #0: CEL runtime error: no such key: memory"),
    ),
    Case(
        "unknown-domain-is-an-empty-map-not-an-error",
        only_gpu_class(
            rslice("s", [dev("gpu-0", model="A100")]),
            claim("c", req("r", 'device.attributes["nic.example.com"].size() == 0')),
        ),
        [("r", "pool-a", "gpu-0")],
    ),
    Case(
        "compile-error-is-an-error",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req("r", "device.nope("))),
        (
            "error",
            "claim default/c: selector #0: CEL compile error: compilation failed: Syntax "
            "error: mismatched input '<EOF>' expecting {'[', '{', '(', ')', '.', '-', '!', "
            "'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
    ),
    Case(
        "missing-device-class",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req(cls="nope"))),
        ("unschedulable", "request r: device class nope does not exist"),
    ),
    Case(
        "more-than-32-devices-per-claim",
        only_gpu_class(rslice("s", TWO_GPUS), claim("c", req(count=33))),
        (
            "error",
            "claim default/c: number of requested devices 33 exceeds the claim limit of 32 "
            "(AllocationResultsMaxSize)",
        ),
    ),
    Case(
        "v1beta1-device-without-basic-not-selectable",
        [
            dclass(version="v1beta1"),
            rslice("s", [{"name": "gpu-0"}, dev("gpu-1")], version="v1beta1"),
            claim("c", req(), version="v1beta1"),
        ],
        [("r", "pool-a", "gpu-1")],
    ),
    Case(
        "first-available-falls-back",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("c", first("r", req("big", count=3), req("small", count=1))),
        ),
        [("r/small", "pool-a", "gpu-0")],
    ),
    Case(
        "first-available-prefers-first",
        only_gpu_class(
            rslice("s", TWO_GPUS),
            claim("c", first("r", req("pair", count=2), req("one"))),
        ),
        [("r/pair", "pool-a", "gpu-0"), ("r/pair", "pool-a", "gpu-1")],
    ),
    Case(
        "first-available-backtracks-on-later-constraint",
        only_gpu_class(
            rslice("s", [dev("gpu-0", numa=0), dev("gpu-1", numa=1), dev("gpu-2", numa=1)]),
            claim(
                "c",
                first("r", req("numa0", f'device.attributes["{DRIVER}"].numa == 0'), req("any")),
                req("other", f'device.attributes["{DRIVER}"].numa == 1'),
                constraints=[match(NUMA)],
            ),
        ),
        [("r/any", "pool-a", "gpu-1"), ("other", "pool-a", "gpu-2")],
    ),
    Case(
        "claims-allocated-in-turn",
        only_gpu_class(rslice("s", TWO_GPUS), claim("one", req()), claim("c", req())),
        [("r", "pool-a", "gpu-1")],
    ),
]


def _run(case: Case) -> simulation.ClaimOutcome:
    inputs = manifests.decode_objects(case.objects)
    report = simulation.simulate(
        inputs,
        node_name=case.node,
        settings=simulation.SimulationSettings(allocator=case.settings),
    )
    return report.outcomes[-1]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_allocation_case(case: Case) -> None:
    outcome = _run(case)
    if case.expected == "unschedulable":
        assert (outcome.status, outcome.error) == ("unschedulable", "cannot allocate all claims")
        assert outcome.allocation is None
    elif isinstance(case.expected, tuple):
        assert (outcome.status, outcome.error) == case.expected
    else:
        assert outcome.status == "allocated", outcome.error
        assert outcome.allocation is not None
        picked = [(r.request, r.pool, r.device) for r in outcome.allocation.results]
        assert picked == case.expected
        assert all(
            r.admin_access is (True if case.admin else None) for r in outcome.allocation.results
        )
        if case.expected_node is not None:
            assert outcome.node == case.expected_node


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
