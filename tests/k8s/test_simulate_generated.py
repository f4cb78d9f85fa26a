"""``dralet simulate`` against the real kube-scheduler on random clusters
(``simulate_scenarios``): every scenario's classes, slices, taint rules and claims are
created, then its pods one at a time, each waited for until the scheduler has placed
it, found it Unschedulable or failed it with an error (``SchedulerError``).

With several nodes the scheduler scores nodes and may pick among equivalent devices, so
each pod is judged on the state the scheduler left: ``simulate`` is given the claims as
they were just before the pod was created (with the allocations the scheduler made for
the pods before it) and must reach the same verdict; where both place the pod,
``simulate``'s allocation must be valid on that state (devices of its node's pools, none
taken twice, as many as each request asks for).

Scenarios are played in batches of ``BATCH`` (their nodes registered, their objects
made, a probe pod waited for, then all deleted), so that node heartbeats keep up. CI
runs ``CI_SCENARIOS`` fixed seeds; ``make simulate-differential`` runs more
(``DRALET_SIMULATE_SCENARIOS``, from ``DRALET_SIMULATE_FIRST_SEED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dralet import kube
from dralet.cli import main
from dralet.kubelet import NodeHeartbeat
from tests.k8s import simulate_scenarios
from tests.k8s.drivernode import eventually
from tests.k8sapi import ClusterApi
from tests.kubefixtures import K8S_TIMEOUT

SECONDS_PER_SCENARIO = 5
"""Time a scenario may take on a loaded two-core machine (CI plays about one a second)."""

SCENARIOS_ENV = "DRALET_SIMULATE_SCENARIOS"
FIRST_SEED_ENV = "DRALET_SIMULATE_FIRST_SEED"
CI_SCENARIOS = 40
"""Scenarios a CI run plays per release (a few minutes on two cores)."""
GATES = ("--feature-gate", "DRAListTypeAttributes=true")
"""The cluster's gates simulate must be told of (its default is the release's)."""
SCHEDULER_CACHE_GRACE = 3.0
"""Seconds between creating the slices and the first pod."""
NS = simulate_scenarios.NAMESPACE
EXERCISED = {
    "device-taints",
    "partitions",
    "shared-capacity",
    "incomplete-pool",
    "invalid-pool",
    "taint-rules",
    "cel-selectors",
    "all-mode",
    "tolerations",
    "capacity-requests",
    "first-available",
    "matchAttribute",
    "distinctAttribute",
    "claims-per-pod",
    "extended-resources",
}
"""Features the CI seeds must all exercise."""


def seeds() -> range:
    first = int(os.environ.get(FIRST_SEED_ENV, "0"))
    return range(first, first + int(os.environ.get(SCENARIOS_ENV, str(CI_SCENARIOS))))


# A larger run gets time in proportion; CI's stays within the k8s tests' own limit.
pytestmark = [
    pytest.mark.k8s,
    pytest.mark.every_k8s_release,
    K8S_TIMEOUT
    if len(seeds()) <= CI_SCENARIOS
    else pytest.mark.timeout(SECONDS_PER_SCENARIO * len(seeds())),
]


Verdict = str
"""scheduled, unschedulable or error."""


def _decided(api: ClusterApi, name: str) -> Verdict | None:
    current = api.get("Pod", name, namespace=NS) or {}
    if current.get("spec", {}).get("nodeName"):
        return "scheduled"
    for condition in current.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("status") == "False":
            reason = condition.get("reason")
            if reason == "Unschedulable":
                return "unschedulable"
            if reason == "SchedulerError":
                return "error"
    return None


def _message(api: ClusterApi, name: str) -> str:
    """The scheduler's word on the pod (its PodScheduled condition), or where it went."""
    current = api.get("Pod", name, namespace=NS) or {}
    if current.get("spec", {}).get("nodeName"):
        return f"on {current['spec']['nodeName']}"
    for condition in current.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return str(condition.get("message", ""))
    return ""


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


def _simulate(
    scenario: simulate_scenarios.Scenario,
    claims: list[dict[str, Any]],
    pod: dict[str, Any],
    release: str,
    path: Path,
) -> dict[str, Any]:
    """simulate's report on ``pod`` given the claims as they are now."""
    nodes = [_node(n) for n in scenario.nodes]
    docs = [*scenario.classes, *scenario.slices, *scenario.rules, *nodes, *claims, pod]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    result = CliRunner().invoke(
        main.cli, ["simulate", "-k", release, *GATES, "-o", "json", str(path)]
    )
    assert result.exit_code in (0, 1) and result.stdout, (result.output, result.exception)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _live_claims(api: ClusterApi, scenario: simulate_scenarios.Scenario) -> list[dict[str, Any]]:
    """The scenario's claims now, with those the scheduler made for extended resources."""
    out = []
    for live in api.list("ResourceClaim", namespace=NS):
        meta = live["metadata"]
        if not meta["name"].startswith(f"{scenario.name}-"):
            continue
        shaped = {
            "apiVersion": live["apiVersion"],
            "kind": "ResourceClaim",
            "metadata": {"name": meta["name"], "namespace": NS},
            "spec": live["spec"],
        }
        allocation = (live.get("status") or {}).get("allocation")
        if allocation:
            shaped["status"] = {"allocation": allocation}
        out.append(shaped)
    return out


def _invalid_allocation(
    scenario: simulate_scenarios.Scenario,
    claims: list[dict[str, Any]],
    report: dict[str, Any],
) -> str | None:
    """Why simulate's placement of the pod is not valid on that state (None if it is)."""
    (pod,) = report["pods"]
    node = pod["node"]
    on_node = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in scenario.slices
        if s["spec"]["nodeName"] == node
        for d in s["spec"].get("devices") or []
    }
    taken: set[tuple[str, str, str]] = set()
    for claim in claims:
        for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get(
            "results"
        ) or []:
            if not r.get("adminAccess") and not r.get("shareID"):
                taken.add((r["driver"], r["pool"], r["device"]))
    specs = {c["metadata"]["name"]: c["spec"]["devices"] for c in scenario.claims}
    extended = f"{pod['name']}-extended-resources"
    own = {key.partition("/")[2] for key in pod["claims"]}
    for outcome in report["claims"]:
        if outcome["name"] not in own:
            continue
        results = outcome["allocation"]["devices"]["results"]
        counts: dict[str, int] = {}
        for r in results:
            device = (r["driver"], r["pool"], r["device"])
            if device not in on_node:
                return f"{outcome['name']}: {device} is not a device of {node}"
            if device in taken and not r.get("adminAccess") and not r.get("shareID"):
                return f"{outcome['name']}: {device} is taken twice"
            if not r.get("adminAccess") and not r.get("shareID"):
                taken.add(device)
            counts[r["request"]] = counts.get(r["request"], 0) + 1
        if outcome["name"] == extended:
            continue
        for request in specs[outcome["name"]]["requests"]:
            exactly = request.get("exactly")
            if exactly is None or exactly.get("allocationMode") == "All":
                continue
            if counts.get(request["name"], 0) != exactly.get("count", 1):
                return f"{outcome['name']}: request {request['name']} got {counts}"
    return None


REASON_CLASSES = (
    ("does not exist", "missing DeviceClass"),
    ("currently being updated", "All over an incomplete pool"),
    ("currently invalid", "All over an invalid pool"),
    ("claim constraint would not be satisfied", "All against a constraint"),
    ("invalid resource pools were encountered", "no fit, an invalid pool on some node"),
    ("cannot allocate all claims", "no fit"),
)
"""simulate's reasons for a pod not placed, by the scheduler's words they hold."""


def _reason_class(error: str) -> str:
    for words, label in REASON_CLASSES:
        if words in error:
            return label
    return error


PROBE = "gen-probe"
BATCH = CI_SCENARIOS
"""Scenarios whose nodes are registered at once: with many more, their heartbeats fall
behind on two cores and the node lifecycle controller taints them NotReady."""


def _probe(probe: str) -> list[dict[str, Any]]:
    """Objects made after every scenario's: a slice of two devices, a DeviceTaintRule on
    the first, a claim and a pod. The scheduler's informers deliver each kind in order, so
    once it gives the pod the second device it has seen every slice, rule and claim."""
    driver = simulate_scenarios.DRIVERS[0]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": probe},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": probe},
            "spec": {
                "driver": driver,
                "pool": {"name": probe, "generation": 1, "resourceSliceCount": 1},
                "nodeName": probe,
                "devices": [{"name": "probe-0"}, {"name": "probe-1"}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": probe},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": probe, "device": "probe-0"},
                "taint": {"key": simulate_scenarios.TAINT_KEY, "effect": "NoSchedule"},
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": probe, "namespace": NS},
            "spec": {
                "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": probe}}]}
            },
        },
    ]


def _probe_pod(probe: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": probe, "namespace": NS},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": probe},
            "containers": [{"name": "c", "image": "busybox"}],
            "resourceClaims": [{"name": "c", "resourceClaimName": probe}],
        },
    }


def _probe_device(api: ClusterApi, probe: str) -> str | None:
    claim = api.get("ResourceClaim", probe, namespace=NS) or {}
    allocation = (claim.get("status") or {}).get("allocation")
    return allocation["devices"]["results"][0]["device"] if allocation else None


@contextlib.asynccontextmanager
async def _batch(
    k8s_api: ClusterApi, made: list[simulate_scenarios.Scenario], index: int
) -> AsyncIterator[None]:
    """The scenarios' objects created and their nodes Ready; their pods, claims and nodes
    deleted after."""
    probe = f"{PROBE}-{index}"
    names = [*(n for s in made for n in s.nodes), probe]
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        beats = [NodeHeartbeat(admin, n) for n in names]
        for beat in beats:
            await beat.register()
        tasks = [asyncio.create_task(beat.run()) for beat in beats]
        try:
            for scenario in made:
                for obj in scenario.objects():
                    k8s_api.create(obj)
            for obj in _probe(probe):
                k8s_api.create(obj)
            await asyncio.sleep(SCHEDULER_CACHE_GRACE)
            k8s_api.create(_probe_pod(probe))
            seen = await eventually(lambda: _probe_device(k8s_api, probe), "the probe's device")
            assert seen == "probe-1", "the scheduler had not seen the probe's DeviceTaintRule"
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # What the next batch need not list again: pods (their extended-resource
            # claims go with them), claims, nodes.
            for scenario in made:
                for pod in scenario.pods:
                    if k8s_api.get("Pod", pod["metadata"]["name"], namespace=NS):
                        k8s_api.delete("Pod", pod["metadata"]["name"], namespace=NS)
                for claim in scenario.claims:
                    k8s_api.delete("ResourceClaim", claim["metadata"]["name"], namespace=NS)
            for name in names:
                k8s_api.delete("Node", name)


async def _play(
    k8s_api: ClusterApi,
    scenario: simulate_scenarios.Scenario,
    release: str,
    tmp_path: Path,
    verdicts: dict[str, int],
    disagreements: list[str],
    reasons: dict[str, int],
) -> None:
    """The scenario's pods one at a time, each judged by the scheduler then by simulate."""
    for pod in scenario.pods:
        name = pod["metadata"]["name"]
        own = {r["resourceClaimName"] for r in pod["spec"]["resourceClaims"]}
        before = [
            c
            for c in _live_claims(k8s_api, scenario)
            if "status" in c or c["metadata"]["name"] in own
        ]
        k8s_api.create(pod)
        real = await eventually(
            lambda n=name: _decided(k8s_api, n), f"the scheduler's decision on {name}"
        )
        # In the event loop's thread: the command is not made to run in another.
        report = _simulate(scenario, before, pod, release, tmp_path / "state.json")
        (simulated,) = report["pods"]
        verdicts[real] += 1
        if simulated["status"] != real:
            disagreements.append(
                f"{name}: kube-scheduler {real} ({_message(k8s_api, name)}), "
                f"simulate {simulated['status']} ({simulated.get('error')})"
            )
        elif real == "scheduled":
            problem = _invalid_allocation(scenario, before, report)
            if problem is not None:
                disagreements.append(f"{name}: simulate's allocation is invalid: {problem}")
        else:
            reason = _reason_class(simulated.get("error") or "")
            reasons[reason] = reasons.get(reason, 0) + 1


async def test_simulate_agrees_with_kube_scheduler_on_random_clusters(
    k8s_api: ClusterApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = [simulate_scenarios.scenario(seed) for seed in seeds()]
    k8s_api.patch(
        "Namespace", NS, {"metadata": {"labels": {simulate_scenarios.ADMIN_LABEL: "true"}}}
    )
    k8s_api.wait_for_default_service_account()
    release = k8s_api.kubernetes_version
    disagreements: list[str] = []
    verdicts = {"scheduled": 0, "unschedulable": 0, "error": 0}
    features: set[str] = set()
    reasons: dict[str, int] = {}
    for index, first in enumerate(range(0, len(scenarios), BATCH)):
        batch = scenarios[first : first + BATCH]
        async with _batch(k8s_api, batch, index):
            for scenario in batch:
                features |= scenario.features
                await _play(k8s_api, scenario, release, tmp_path, verdicts, disagreements, reasons)
    pods = sum(verdicts.values())
    with capsys.disabled():
        print(
            f"\nsimulate vs kube-scheduler on random clusters ({release}): "
            f"{len(scenarios)} scenarios, {pods} pods ({verdicts}), "
            f"{len(disagreements)} disagreements; features: {sorted(features)}; "
            f"reasons: {reasons}"
        )
        for line in disagreements:
            print(f"  {line}")
    assert disagreements == []
    if len(scenarios) >= CI_SCENARIOS:
        assert features >= EXERCISED, f"not exercised: {EXERCISED - features}"
        assert verdicts["scheduled"] and verdicts["unschedulable"]
