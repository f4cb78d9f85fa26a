"""``dralet simulate`` against the real kube-scheduler: the same cluster state (a node's
ResourceSlice, a DeviceClass, ResourceClaims and the Pods that use them) is given to
the kube-scheduler of each release CI builds (k8s/releases, a run per release) and to
``dralet simulate`` at that release; each pod must get the same verdict (scheduled or
unschedulable) and each claim the same devices.

Every scenario is one node with one pool (its devices in one slice, its shared counters
in another), so the allocation is deterministic (the structured allocator walks a
slice's devices in order, first fit with backtracking, as simulate does) and the pods
are created one at a time, in name order, each waited for: the scheduler's decisions
and simulate's are made in the same order over the same free devices. Scenarios are
generated from fixed seeds (device attributes and capacity, claims with counts, CEL
selectors over attributes and capacity, matchAttribute constraints, pods with one or
two claims), from more seeds for the 1.36+ features (GPUs split into partitions that
share counters, tainted devices and requests that tolerate them, devices shared by
capacity with request policies, distinctAttribute), from more seeds for list-type
attributes (alpha, on in the test cluster as every DRA gate is: ``includes()`` selectors,
matchAttribute needing a common element, distinctAttribute needing disjoint lists), plus
hand-written ones. simulate gets ``--feature-gate DRAListTypeAttributes=true`` to match.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet import kube
from dralet.allocation.quantity import parse_quantity
from dralet.kubelet import NodeHeartbeat
from tests.k8s.drivernode import eventually
from tests.k8sapi import ClusterApi
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, K8S_TIMEOUT]

DRIVER = "gpu.example.com"
NS = "default"
MODELS = ("a100", "h100")
MEMORY = ("1Gi", "2Gi", "4Gi")
SEEDS = range(30)
FEATURE_SEEDS = range(100, 130)
LIST_SEEDS = range(200, 215)
GATES = ("--feature-gate", "DRAListTypeAttributes=true")
"""The cluster's gates simulate must be told of (its default is the release's)."""
SCHEDULER_CACHE_GRACE = 3.0
"""Seconds between creating the slices and the first pod (see the test)."""


def _selector(rng: random.Random) -> list[dict[str, Any]]:
    choice = rng.choice(("none", "none", "model", "memory"))
    if choice == "model":
        expression = f'device.attributes["{DRIVER}"].model == "{rng.choice(MODELS)}"'
    elif choice == "memory":
        expression = (
            f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{rng.choice(MEMORY)}")) >= 0'
        )
    else:
        return []
    return [{"cel": {"expression": expression}}]


def generated(seed: int) -> dict[str, Any]:
    """A scenario: the node's devices, and pods (in order) each with its claims."""
    rng = random.Random(seed)
    devices = [
        {
            "name": f"gpu-{j}",
            "attributes": {"model": {"string": rng.choice(MODELS)}},
            "capacity": {"memory": {"value": rng.choice(MEMORY)}},
        }
        for j in range(rng.randint(2, 5))
    ]
    pods = []
    for p in range(rng.randint(2, 4)):
        claims = []
        for c in range(rng.choice((1, 1, 2))):
            count = rng.choice((1, 1, 2))
            exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
            if selectors := _selector(rng):
                exactly["selectors"] = selectors
            spec: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
            if count == 2 and rng.random() < 0.5:
                spec["constraints"] = [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/model"}]
            claims.append((f"p{p}-c{c}", spec))
        pods.append((f"p{p}", claims))
    return {"devices": devices, "pods": pods}


TAINT_KEY = "example.com/state"
POLICIES: tuple[dict[str, Any] | None, ...] = (
    None,
    {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
    {"default": "2Gi", "validValues": ["2Gi", "4Gi", "8Gi"]},
)


def _kind(kind: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].kind == "{kind}"'}}]


def _partitions(gpu: int) -> list[dict[str, Any]]:
    """A GPU as a whole device and as two halves, all taking from one counter set."""

    def device(name: str, memory: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"kind": {"string": "part"}, "gpu": {"int": gpu}},
            "capacity": {"memory": {"value": memory}},
            "consumesCounters": [
                {"counterSet": f"gpu-{gpu}", "counters": {"memory": {"value": memory}}}
            ],
        }

    return [
        device(f"gpu{gpu}", "8Gi"),
        device(f"gpu{gpu}-half-a", "4Gi"),
        device(f"gpu{gpu}-half-b", "4Gi"),
    ]


def feature_scenario(seed: int) -> dict[str, Any]:
    """A 1.36+ scenario: partitions over shared counters, tainted and shared devices."""
    rng = random.Random(seed)
    gpus = rng.randint(1, 2)
    devices = [d for g in range(gpus) for d in _partitions(g)]
    for j in range(rng.randint(1, 2)):
        device: dict[str, Any] = {
            "name": f"plain-{j}",
            "attributes": {"kind": {"string": "plain"}, "gpu": {"int": j}},
        }
        effect = rng.choice(("NoSchedule", "NoExecute", "None", None))
        if effect is not None:
            device["taints"] = [
                {"key": TAINT_KEY, "value": rng.choice(("a", "b")), "effect": effect}
            ]
        devices.append(device)
    for j in range(rng.randint(1, 2)):
        capacity: dict[str, Any] = {"value": "8Gi"}
        policy = rng.choice(POLICIES)
        if policy is not None:
            capacity["requestPolicy"] = policy
        devices.append(
            {
                "name": f"shared-{j}",
                "attributes": {"kind": {"string": "shared"}, "gpu": {"int": j}},
                "allowMultipleAllocations": True,
                "capacity": {"memory": capacity},
            }
        )
    pods = []
    for p in range(rng.randint(2, 5)):
        kind = rng.choice(("part", "part", "plain", "shared", "shared"))
        count = rng.choice((1, 1, 2))
        exactly: dict[str, Any] = {
            "deviceClassName": DRIVER,
            "count": count,
            "selectors": _kind(kind),
        }
        spec: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
        if kind == "plain" and rng.random() < 0.6:
            exactly["tolerations"] = [
                rng.choice(
                    (
                        {"key": TAINT_KEY, "operator": "Exists"},
                        {"key": TAINT_KEY, "operator": "Equal", "value": "a"},
                        {"operator": "Exists", "effect": "NoSchedule"},
                    )
                )
            ]
        if kind == "shared" and rng.random() < 0.7:
            exactly["capacity"] = {
                "requests": {"memory": rng.choice(("1Gi", "1500Mi", "3Gi", "5Gi"))}
            }
        if kind == "shared" and count == 2 and rng.random() < 0.5:
            spec["constraints"] = [{"requests": ["gpus"], "distinctAttribute": f"{DRIVER}/gpu"}]
        pods.append((f"p{p}", [(f"p{p}-c0", spec)]))
    counters = [{"name": f"gpu-{g}", "counters": {"memory": {"value": "8Gi"}}} for g in range(gpus)]
    # DeviceTaintRules (GA, on in 1.37) from a generator of their own, so the scenarios
    # above stay as they were. NoSchedule only: the eviction controller acts on NoExecute.
    rules_rng = random.Random(f"rules-{seed}")
    rules = []
    if rules_rng.random() < 0.6:
        device = rules_rng.choice([d["name"] for d in devices])
        value = rules_rng.choice(("a", "b"))
        rules.append(
            {"device": device, "taint": {"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}}
        )
    return {"devices": devices, "pods": pods, "counters": counters, "rules": rules}


def list_scenario(seed: int) -> dict[str, Any]:
    """Devices whose NUMA nodes and model aliases are lists; claims that select with
    ``includes()`` and constrain pairs by a common NUMA node or disjoint ones."""
    rng = random.Random(seed)
    devices = []
    for j in range(rng.randint(3, 5)):
        numa = sorted(rng.sample(range(4), rng.randint(1, 2)))
        aliases = sorted(rng.sample(MODELS, rng.randint(1, 2)))
        devices.append(
            {
                "name": f"gpu-{j}",
                "attributes": {"numa": {"ints": numa}, "models": {"strings": aliases}},
            }
        )
    pods = []
    for p in range(rng.randint(2, 3)):
        count = rng.choice((1, 2, 2))
        exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
        if rng.random() < 0.5:
            model = rng.choice(MODELS)
            expression = f'device.attributes["{DRIVER}"].models.includes("{model}")'
            exactly["selectors"] = [{"cel": {"expression": expression}}]
        spec: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
        if count == 2:
            constraint = rng.choice(("matchAttribute", "matchAttribute", "distinctAttribute"))
            spec["constraints"] = [{"requests": ["gpus"], constraint: f"{DRIVER}/numa"}]
        pods.append((f"p{p}", [(f"p{p}-c0", spec)]))
    return {"devices": devices, "pods": pods}


def _selector_memory(amount: str) -> list[dict[str, Any]]:
    expression = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{amount}")) >= 0'
    return [{"cel": {"expression": expression}}]


HAND_WRITTEN = {
    # The first claim must not take the only large device the second one needs.
    "backtrack-within-a-pod": {
        "devices": [
            {"name": "big", "capacity": {"memory": {"value": "4Gi"}}},
            {"name": "small", "capacity": {"memory": {"value": "1Gi"}}},
        ],
        "pods": [
            (
                "p0",
                [
                    (
                        "p0-any",
                        {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]},
                    ),
                    (
                        "p0-big",
                        {
                            "requests": [
                                {
                                    "name": "gpus",
                                    "exactly": {
                                        "deviceClassName": DRIVER,
                                        "selectors": _selector_memory("4Gi"),
                                    },
                                }
                            ]
                        },
                    ),
                ],
            )
        ],
    },
}


def objects(name: str, node: str, scenario: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The scenario's objects for ``node``: slice, claims, and pods in creation order."""
    counters = scenario.get("counters")
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2 if counters else 1}
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": pool,
                "nodeName": node,
                "devices": scenario["devices"],
            },
        }
    ]
    if counters:
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-counters"},
                "spec": {
                    "driver": DRIVER,
                    "pool": pool,
                    "nodeName": node,
                    "sharedCounters": counters,
                },
            }
        )
    claims, pods = [], []
    for pod_name, pod_claims in scenario["pods"]:
        for claim_name, spec in pod_claims:
            claims.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"{name}-{claim_name}", "namespace": NS},
                    "spec": {"devices": spec},
                }
            )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{pod_name}", "namespace": NS},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"claims": [{"name": c} for c, _ in pod_claims]},
                        }
                    ],
                    "resourceClaims": [
                        {"name": c, "resourceClaimName": f"{name}-{c}"} for c, _ in pod_claims
                    ],
                },
            }
        )
    rules = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"{node}-rule-{i}"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": node, "device": rule["device"]},
                "taint": rule["taint"],
            },
        }
        for i, rule in enumerate(scenario.get("rules") or ())
    ]
    return {"slices": slices, "rules": rules, "claims": claims, "pods": pods}


def _class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


Picked = list[tuple[str, tuple[tuple[str, int], ...]]]
"""A claim's devices, sorted, each with what its share consumed (empty if not a share)."""


def _picked(allocation: dict[str, Any] | None) -> Picked | None:
    if not allocation:
        return None
    return sorted(
        (
            r["device"],
            tuple(
                sorted(
                    (name, int(parse_quantity(str(value))))
                    for name, value in (r.get("consumedCapacity") or {}).items()
                )
            ),
        )
        for r in allocation["devices"]["results"]
    )


def _devices(claim: dict[str, Any] | None) -> Picked | None:
    return _picked(((claim or {}).get("status") or {}).get("allocation"))


async def scheduler_verdicts(
    api: ClusterApi, parts: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, bool], dict[str, Picked | None]]:
    """Pod → scheduled; claim → its devices, as kube-scheduler decides, pod by pod (the
    slice and the claims exist already)."""
    verdicts: dict[str, bool] = {}
    for pod in parts["pods"]:
        api.create(pod)
        name = pod["metadata"]["name"]

        def decided(pod_name: str = name) -> str | None:
            current = api.get("Pod", pod_name, namespace=NS) or {}
            if current.get("spec", {}).get("nodeName"):
                return "scheduled"
            for condition in current.get("status", {}).get("conditions") or []:
                if (
                    condition["type"] == "PodScheduled"
                    and condition.get("reason") == "Unschedulable"
                ):
                    return "unschedulable"
            return None

        verdicts[name] = (
            await eventually(decided, f"the scheduler's decision on {name}") == "scheduled"
        )
    for name, scheduled in verdicts.items():
        # An unschedulable pod must stay so: one scheduled later means the first verdict
        # was made on a stale view.
        later = (api.get("Pod", name, namespace=NS) or {}).get("spec", {}).get("nodeName")
        assert scheduled or not later, f"{name} was unschedulable, then scheduled"
    claims = {
        c["metadata"]["name"]: _devices(
            api.get("ResourceClaim", c["metadata"]["name"], namespace=NS)
        )
        for c in parts["claims"]
    }
    return verdicts, claims


def _simulate(target: str, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dralet simulate`` as the cluster's scheduler runs: its release, its gates."""
    command = [sys.executable, "-m", "dralet.cli.main", "simulate", "-k", target, *GATES, *args]
    return subprocess.run(
        [*command, str(path)], capture_output=True, text=True, check=False, timeout=60
    )


def simulate_verdicts(
    parts: dict[str, list[dict[str, Any]]], tmp_path: Path, target: str
) -> tuple[dict[str, bool], dict[str, Picked | None]]:
    path = tmp_path / "state.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [_class(), *parts["slices"], *parts["rules"], *parts["claims"], *parts["pods"]]
        )
    )
    out = _simulate(target, path, "-o", "json")
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    verdicts = {p["name"]: p["status"] == "scheduled" for p in report["pods"]}
    claims: dict[str, Picked | None] = {}
    for claim in report["claims"]:
        allocation = claim.get("allocation")
        claims[claim["name"]] = _picked(allocation)
    # A claim of an unschedulable pod is not allocated, whatever simulate tried for it.
    return verdicts, claims


@pytest.fixture
async def heartbeats(k8s_api: ClusterApi) -> AsyncIterator[list[str]]:
    """Ready nodes, one per scenario, kept Ready for the test."""
    total = len(SEEDS) + len(FEATURE_SEEDS) + len(LIST_SEEDS) + len(HAND_WRITTEN)
    names = [f"sim-{i}" for i in range(total)]
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        beats = [NodeHeartbeat(admin, n) for n in names]
        for beat in beats:
            await beat.register()
        tasks = [asyncio.create_task(beat.run()) for beat in beats]
        k8s_api.create(_class())
        k8s_api.wait_for_default_service_account()
        try:
            yield names
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_simulate_agrees_with_kube_scheduler(
    k8s_api: ClusterApi, heartbeats: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = (
        [(f"g{seed}", generated(seed)) for seed in SEEDS]
        + [(f"f{seed}", feature_scenario(seed)) for seed in FEATURE_SEEDS]
        + [(f"l{seed}", list_scenario(seed)) for seed in LIST_SEEDS]
        + list(HAND_WRITTEN.items())
    )
    disagreements: list[str] = []
    pods = claims_compared = unschedulable = 0
    features = {
        "shares": 0,
        "partitions": 0,
        "tainted": 0,
        "refused-feature-pods": 0,
        "taint-rules": 0,
        "list-allocations": 0,
    }
    every = [objects(name, node, s) for (name, s), node in zip(scenarios, heartbeats, strict=True)]
    for parts in every:
        for obj in [*parts["slices"], *parts["rules"], *parts["claims"]]:
            k8s_api.create(obj)
        features["taint-rules"] += len(parts["rules"])
    # The scheduler must see every slice before the first pod: a verdict made before its
    # informer has a node's slice would be "unschedulable" for want of devices.
    await asyncio.sleep(SCHEDULER_CACHE_GRACE)
    for parts in every:
        real_pods, real_claims = await scheduler_verdicts(k8s_api, parts)
        sim_pods, sim_claims = simulate_verdicts(parts, tmp_path, k8s_api.kubernetes_version)
        pods += len(real_pods)
        unschedulable += sum(not scheduled for scheduled in real_pods.values())
        for pod, scheduled in real_pods.items():
            if sim_pods.get(pod) != scheduled:
                disagreements.append(
                    f"{pod}: kube-scheduler {'scheduled' if scheduled else 'unschedulable'}, "
                    f"simulate {sim_pods.get(pod)}"
                )
        if any("counters" in s["metadata"]["name"] for s in parts["slices"]):
            features["refused-feature-pods"] += sum(not v for v in real_pods.values())
        for claim, devices in real_claims.items():
            if devices is None:
                continue
            claims_compared += 1
            features["shares"] += sum(bool(used) for _, used in devices)
            features["partitions"] += sum(d[3:4].isdigit() for d, _ in devices)
            features["tainted"] += sum(d.startswith("plain") for d, _ in devices)
            features["list-allocations"] += claim.startswith("l")
            if sim_claims.get(claim) != devices:
                disagreements.append(
                    f"{claim}: kube-scheduler {devices}, simulate {sim_claims.get(claim)}"
                )
    with capsys.disabled():
        print(
            f"\nsimulate vs kube-scheduler: {len(scenarios)} scenarios, {pods} pods "
            f"({unschedulable} unschedulable), {claims_compared} allocations compared, "
            f"{len(disagreements)} disagreements; 1.36+ scenarios: {features['shares']} shares, "
            f"{features['partitions']} partitions, {features['tainted']} devices that may be "
            f"tainted, {features['refused-feature-pods']} pods refused, "
            f"{features['taint-rules']} DeviceTaintRules; list attributes: "
            f"{features['list-allocations']} allocations"
        )
    assert disagreements == []
    assert 0 < unschedulable < pods, "the scenarios exercise both verdicts"
    assert all(features.values()), f"the 1.36+ scenarios exercise every feature: {features}"


ATTACHED = "dra.example.com/attached"


def _binding_slices(node: str) -> list[dict[str, Any]]:
    """Two pools on ``node``: ``a-fabric`` (first by name) whose device waits for a
    binding condition, and ``b-local`` with a plain device."""

    def one(pool: str, device: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{pool}"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node,
                "devices": [device],
            },
        }

    fabric = {
        "name": "fabric-0",
        "bindingConditions": [ATTACHED],
        "bindingFailureConditions": ["dra.example.com/failed"],
    }
    return [one("a-fabric", fabric), one("b-local", {"name": "local-0"})]


async def test_binding_conditions_agree_with_kube_scheduler(
    k8s_api: ClusterApi, tmp_path: Path
) -> None:
    """The scheduler searches pools with binding conditions last, allocates such a device
    with its conditions in the result, and binds the pod only once the claim's status
    says the condition is True; simulate must pick the same devices, carry the same
    conditions, and say the pod waits for them."""
    node = "sim-binding"
    name = "bc"
    scenario = {
        "devices": [],
        "pods": [
            (
                f"p{p}",
                [
                    (
                        f"p{p}-c0",
                        {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]},
                    )
                ],
            )
            for p in range(2)
        ],
    }
    parts = objects(name, node, scenario)
    parts["slices"] = _binding_slices(node)
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        beat = NodeHeartbeat(admin, node)
        await beat.register()
        task = asyncio.create_task(beat.run())
        try:
            if k8s_api.get("DeviceClass", DRIVER) is None:
                k8s_api.create(_class())
            k8s_api.wait_for_default_service_account()
            for obj in [*parts["slices"], *parts["claims"]]:
                k8s_api.create(obj)
            await asyncio.sleep(SCHEDULER_CACHE_GRACE)
            real: dict[str, list[tuple[str, list[str]]]] = {}
            for pod in parts["pods"]:
                k8s_api.create(pod)
                claim_name = pod["spec"]["resourceClaims"][0]["resourceClaimName"]

                def allocated(claim: str = claim_name) -> list[tuple[str, list[str]]] | None:
                    current = k8s_api.get("ResourceClaim", claim, namespace=NS) or {}
                    allocation = (current.get("status") or {}).get("allocation")
                    if not allocation:
                        return None
                    return [
                        (r["device"], list(r.get("bindingConditions") or []))
                        for r in allocation["devices"]["results"]
                    ]

                real[claim_name] = await eventually(allocated, f"the allocation of {claim_name}")
            waiting = f"{name}-p1"
            assert (
                not (k8s_api.get("Pod", waiting, namespace=NS) or {})
                .get("spec", {})
                .get("nodeName")
            ), "a pod whose device waits for a binding condition is not bound yet"

            path = tmp_path / "state.yaml"
            path.write_text(
                yaml.safe_dump_all([_class(), *parts["slices"], *parts["claims"], *parts["pods"]])
            )
            out = await asyncio.to_thread(_simulate, k8s_api.kubernetes_version, path, "-o", "json")
            report = json.loads(out.stdout)
            simulated = {
                c["name"]: [
                    (r["device"], list(r.get("bindingConditions") or []))
                    for r in c["allocation"]["devices"]["results"]
                ]
                for c in report["claims"]
            }
            assert simulated == real
            assert real == {
                f"{name}-p0-c0": [("local-0", [])],
                f"{name}-p1-c0": [("fabric-0", [ATTACHED])],
            }
            table = (await asyncio.to_thread(_simulate, k8s_api.kubernetes_version, path)).stdout
            assert f"waits for binding conditions {ATTACHED}" in table

            k8s_api.patch(
                "ResourceClaim",
                f"{name}-p1-c0",
                {
                    "status": {
                        "devices": [
                            {
                                "driver": DRIVER,
                                "pool": "a-fabric",
                                "device": "fabric-0",
                                "conditions": [
                                    {
                                        "type": ATTACHED,
                                        "status": "True",
                                        "reason": "Attached",
                                        "message": "",
                                        "lastTransitionTime": "2026-12-04T00:00:00Z",
                                    }
                                ],
                            }
                        ]
                    }
                },
                namespace=NS,
                subresource="status",
            )

            def bound() -> str | None:
                pod = k8s_api.get("Pod", waiting, namespace=NS) or {}
                return pod.get("spec", {}).get("nodeName") or None

            assert await eventually(bound, f"{waiting} bound once its condition is True") == node
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


FIXTURES = Path(__file__).resolve().parent.parent / "cli" / "simulate_fixtures"
RELEASE_FIXTURES = (
    "k138-capacity-qualified-name.yaml",
    "taint-rule-without-selector.yaml",
    "taint-rule-empty-selector.yaml",
)
"""simulate's 1.38 cases: a capacity named with the driver's domain, DeviceTaintRules
without a selector and with an empty one."""


def _fixture_parts(fixture: str, node: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The fixture's objects on ``node`` with names of their own, and a pod for its claim."""
    prefix = node
    docs = list(yaml.safe_load_all((FIXTURES / fixture).read_text()))
    classes = {d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"}
    out: list[dict[str, Any]] = []
    claim_name = ""
    for doc in docs:
        doc["metadata"]["name"] = f"{prefix}-{doc['metadata']['name']}"
        spec = doc["spec"]
        if doc["kind"] == "ResourceSlice":
            spec["nodeName"] = node
            spec["pool"]["name"] = node
        if doc["kind"] == "ResourceClaim":
            claim_name = doc["metadata"]["name"]
            for request in spec["devices"]["requests"]:
                if request["exactly"]["deviceClassName"] in classes:
                    request["exactly"]["deviceClassName"] = (
                        f"{prefix}-{request['exactly']['deviceClassName']}"
                    )
        out.append(doc)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{prefix}-pod", "namespace": NS},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "c"}]}}
            ],
            "resourceClaims": [{"name": "c", "resourceClaimName": claim_name}],
        },
    }
    return out, pod


def _verdict(api: ClusterApi, name: str) -> str | None:
    current = api.get("Pod", name, namespace=NS) or {}
    if current.get("spec", {}).get("nodeName"):
        return "scheduled"
    for condition in current.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return "unschedulable"
    return None


@pytest.mark.parametrize("fixture", RELEASE_FIXTURES)
async def test_the_release_fixtures_agree_with_kube_scheduler(
    k8s_api: ClusterApi, tmp_path: Path, fixture: str
) -> None:
    """Each fixture, with a pod for its claim, on a node of its own; a taint rule is
    deleted after the verdict (an empty selector taints every device of the cluster)."""
    node = f"fx-{fixture.removesuffix('.yaml')}"
    objects, pod = _fixture_parts(fixture, node)
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        beat = NodeHeartbeat(admin, node)
        await beat.register()
        task = asyncio.create_task(beat.run())
        rules = [o for o in objects if o["kind"] == "DeviceTaintRule"]
        try:
            k8s_api.wait_for_default_service_account()
            for obj in objects:
                k8s_api.create(obj)
            await asyncio.sleep(SCHEDULER_CACHE_GRACE)
            k8s_api.create(pod)
            name = pod["metadata"]["name"]
            real = await eventually(lambda: _verdict(k8s_api, name), f"the verdict on {name}")
            path = tmp_path / "state.yaml"
            path.write_text(yaml.safe_dump_all([*objects, pod]))
            out = await asyncio.to_thread(_simulate, k8s_api.kubernetes_version, path, "-o", "json")
            (simulated,) = json.loads(out.stdout)["pods"]
            assert simulated["status"] == real, simulated.get("error")
        finally:
            for rule in rules:
                k8s_api.delete("DeviceTaintRule", rule["metadata"]["name"])
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_simulate_reads_taint_rules_nodes_and_pending_pods_of_a_live_cluster(
    k8s_api: ClusterApi, tmp_path: Path
) -> None:
    """``--kubeconfig`` alone: the pending pod is simulated, and the device a
    DeviceTaintRule taints is not free, as the scheduler finds."""
    node = "sim-live"
    name = "live"
    scenario = {
        "devices": [{"name": "gpu-0"}],
        "pods": [
            (
                "p0",
                [
                    (
                        "p0-c0",
                        {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]},
                    )
                ],
            )
        ],
        "rules": [
            {"device": "gpu-0", "taint": {"key": TAINT_KEY, "value": "a", "effect": "NoSchedule"}}
        ],
    }
    parts = objects(name, node, scenario)
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        beat = NodeHeartbeat(admin, node)
        await beat.register()
        task = asyncio.create_task(beat.run())
        try:
            if k8s_api.get("DeviceClass", DRIVER) is None:
                k8s_api.create(_class())
            k8s_api.wait_for_default_service_account()
            for obj in [*parts["slices"], *parts["rules"], *parts["claims"]]:
                k8s_api.create(obj)
            await asyncio.sleep(SCHEDULER_CACHE_GRACE)
            (pod,) = parts["pods"]
            k8s_api.create(pod)
            pod_name = pod["metadata"]["name"]
            real = await eventually(
                lambda: _verdict(k8s_api, pod_name), f"the verdict on {pod_name}"
            )
            assert real == "unschedulable"
            nothing = tmp_path / "nothing.yaml"
            nothing.write_text("")
            out = await asyncio.to_thread(
                _simulate,
                k8s_api.kubernetes_version,
                nothing,
                "--kubeconfig",
                str(k8s_api.cluster.admin_kubeconfig),
                "-o",
                "json",
            )
            report = json.loads(out.stdout)
            live = {p["name"]: p for p in report["pods"]}
            assert live[pod_name]["status"] == "unschedulable", live[pod_name]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
