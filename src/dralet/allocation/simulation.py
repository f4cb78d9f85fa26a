"""A dry run of scheduling: each pod in turn (then each claim no pod uses), on the first
node where it fits.

Owns the loop the scheduler's Filter runs for a pod: all the pod's unallocated claims
are allocated together on one node, the allocator backtracking across them (a first
claim's pick must not make the second unschedulable when another pick fits both);
nodes are tried in name order (or only the one asked for), every one of them as the
scheduler's Filter does: an allocator error on any node fails the pod, else the first
node where everything fits wins, and its devices count as in use for the pods after it.
A request naming a missing DeviceClass makes the pod Unschedulable before any node is
tried; extended resources backed by DRA add the pod's own claim (``extended``). A claim
allocated for an earlier pod (or with ``status.allocation``) binds the later pods that
share it to a node it can be reached from. A claim from a template is generated per
pod, named ``<pod>-<pod claim name>``. Claims no pod uses are allocated one by one
afterwards, in input order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from dralet.allocation import (
    allocator,
    cel,
    eviction,
    extended,
    manifests,
    model,
    nodes,
    pools,
    taintrules,
)
from dralet.allocation.inuse import InUse

__all__ = [
    "ANY_NODE",
    "ClaimOutcome",
    "PodOutcome",
    "SimulationReport",
    "SimulationSettings",
    "simulate",
]

ANY_NODE = ""
"""The node name used when no node is known (only allNodes slices, no Node objects)."""
ALL_IN_USE = "every device visible from this node is in use"
NOT_REACHABLE = "cannot reach a claim the pod shares"

Status = Literal["allocated", "already-allocated", "unschedulable", "error"]


@dataclass(frozen=True)
class SimulationSettings:
    """How the dry run behaves."""

    allocator: allocator.AllocatorSettings = field(default_factory=allocator.AllocatorSettings)
    """The simulated scheduler's own settings."""
    max_explained_nodes: int = 5
    """Nodes whose rejections are kept per claim when explaining a claim that did not fit."""
    evictions: eviction.EvictionSettings = field(default_factory=eviction.EvictionSettings)
    """How the device taint eviction controller reads already-allocated claims."""
    filter_every_node: bool = True
    """Try a pod on every node, as the scheduler's Filter does, so that an allocator error
    on any node aborts the pod even where an earlier node fits; off stops at the first fit."""


@dataclass(frozen=True)
class ClaimOutcome:
    """What happened to one claim."""

    claim: model.ResourceClaim
    status: Status
    node: str | None = None
    allocation: model.AllocationResult | None = None
    error: str | None = None
    nodes_tried: int = 0
    explanations: tuple[allocator.NodeAllocation, ...] = ()
    """With explain: the chosen node's outcome, or the first nodes tried when none fit."""
    eviction: str | None = None
    """A claim (already allocated or allocated in the run) whose pods NoExecute device
    taints evict: why."""


PodStatus = Literal["scheduled", "unschedulable", "error"]


@dataclass(frozen=True)
class PodOutcome:
    """What happened to one pod: the node its claims were allocated on, or why none."""

    pod: model.Pod
    status: PodStatus
    node: str | None = None
    claims: tuple[str, ...] = ()
    """Keys of the claims the pod uses (generated names for templates)."""
    error: str | None = None
    nodes_tried: int = 0


@dataclass(frozen=True)
class SimulationReport:
    """Every pod's and claim's outcome, in input order."""

    outcomes: tuple[ClaimOutcome, ...]
    search_order: str = pools.SEARCH_ORDER
    ignored: tuple[str, ...] = ()
    pods: tuple[PodOutcome, ...] = ()

    @property
    def all_allocated(self) -> bool:
        return all(o.status in ("allocated", "already-allocated") for o in self.outcomes) and all(
            p.status == "scheduled" for p in self.pods
        )


def _needs_a_free_device(claim: model.ResourceClaim) -> bool:
    """True when no node whose devices are all in use can satisfy the claim."""
    return bool(claim.requests) and all(
        alternative.allocation_mode == model.EXACT_COUNT and not alternative.admin_access
        for request in claim.requests
        for alternative in request.alternatives
    )


def _nodes(
    inputs: manifests.Inputs, inventory: pools.Inventory, node_name: str | None
) -> list[model.Node]:
    known = {node.name: node for node in inputs.nodes}
    if node_name is not None:
        return [known.get(node_name, model.Node(name=node_name))]
    for name in inventory.node_names:
        known.setdefault(name, model.Node(name=name))
    if not known:
        return [model.Node(name=ANY_NODE)]
    return [known[name] for name in sorted(known)]


class _Run:
    def __init__(
        self,
        inputs: manifests.Inputs,
        *,
        node_name: str | None,
        explain: bool,
        engine: cel.CelEngine,
        settings: SimulationSettings,
    ) -> None:
        features = settings.allocator.features
        slices = inputs.slices
        if features.device_taints and features.device_taint_rules:
            slices = taintrules.apply(slices, inputs.taint_rules)
        self.inventory = pools.Inventory(slices, partitionable=features.partitionable_devices)
        self.devices = {
            model.DeviceId(s.driver, s.pool, d.name): d for s in slices for d in s.devices
        }
        self.nodes = _nodes(inputs, self.inventory, node_name)
        self.allocator = allocator.Allocator(
            inputs.classes, engine=engine, settings=settings.allocator
        )
        self.in_use = InUse.from_claims(inputs.claims)
        self.classes = inputs.classes
        self.explain = explain
        self.settings = settings
        self.done: dict[str, model.ResourceClaim] = {}
        """Claims allocated in this run, by key."""
        self.claim_nodes: dict[str, str] = {}
        """The node each claim allocated in this run was allocated for."""
        self._free: dict[str, int] = {}
        self._first_open = 0
        """Index of the first node that may still have a free device."""
        """Per node visited so far: how many of the devices it sees are not in use."""
        self._seen_by: dict[model.DeviceId, list[str]] = {}

    def _free_devices(self, node_pools: pools.NodePools) -> int:
        name = node_pools.node.name
        free = self._free.get(name)
        if free is None:
            free = 0
            for candidate in node_pools.candidates:
                self._seen_by.setdefault(candidate.device_id, []).append(name)
                free += candidate.device_id not in self.in_use.whole
            self._free[name] = free
        return free

    def _hold(self, claim: model.ResourceClaim, allocation: model.AllocationResult) -> None:
        for result in allocation.results:
            if result.admin_access or result.share_id is not None:
                continue
            if result.device_id not in self.in_use.whole:
                for name in self._seen_by.get(result.device_id, ()):
                    self._free[name] -= 1
        self.in_use.hold(claim.key, allocation.results)

    def pod(
        self, pod: model.Pod, claims: dict[str, model.ResourceClaim], templates: frozenset[str]
    ) -> tuple[PodOutcome, list[ClaimOutcome]]:
        """Allocate all of a pod's pending claims together on the first node that fits."""
        used: list[model.ResourceClaim] = []
        for ref in pod.claims:
            if ref.claim_name is not None:
                key = f"{pod.namespace}/{ref.claim_name}"
                found = self.done.get(key) or claims.get(key)
                if found is None or key in templates:
                    return PodOutcome(
                        pod, "error", error=f"ResourceClaim {key} is not in the input"
                    ), []
                used.append(found)
            else:
                key = f"{pod.namespace}/{ref.template_name}"
                template = claims.get(key)
                if template is None or key not in templates:
                    return PodOutcome(
                        pod, "error", error=f"ResourceClaimTemplate {key} is not in the input"
                    ), []
                used.append(replace(template, name=f"{pod.name}-{ref.name}", allocation=None))
        backed, unbacked = extended.claim_for(pod, self.classes)
        if backed is not None:
            used.append(backed)
        keys = tuple(c.key for c in used)
        if unbacked:
            # No class backs it and no node lists it: "cannot fit resource" on every node
            # (extendeddynamicresources.go, filterExtendedResources).
            return PodOutcome(
                pod, "unschedulable", claims=keys, error=f"cannot fit resource {unbacked[0]}"
            ), []
        bound = [c for c in used if c.allocation is not None]
        pending = [c for c in used if c.allocation is None]
        for claim in pending:
            missing = self.allocator.missing_class(claim)
            if missing is not None:
                return PodOutcome(pod, "unschedulable", claims=keys, error=missing), [
                    ClaimOutcome(claim=claim, status="unschedulable", error=missing)
                ]
        for claim in pending:
            problem = self.allocator.claim_limit_problem(claim)
            if problem is not None:
                return PodOutcome(pod, "error", claims=keys, error=problem), [
                    ClaimOutcome(claim=claim, status="error", error=problem)
                ]
        fit: tuple[int, model.Node, allocator.NodeAllocation] | None = None
        reasons: dict[str, int] = {}
        for tried, node in enumerate(self.nodes, start=1):
            if not all(self._reachable(claim, node) for claim in bound):
                reasons[NOT_REACHABLE] = reasons.get(NOT_REACHABLE, 0) + 1
                continue
            node_pools = self.inventory.for_node(node)
            try:
                outcome = self.allocator.allocate(
                    pending, node_pools=node_pools, in_use=self.in_use
                )
            except allocator.AllocationError as error:
                # The scheduler filters every node, and an error on any one aborts the
                # pod, even where another node fits (k8s.io/kubernetes@v1.37.2 pkg/scheduler/
                # framework/plugins/dynamicresources/dynamicresources.go, Filter: an
                # allocator error that is not ErrFailedAllocationOnNode is statusError).
                return PodOutcome(
                    pod, "error", node=node.name, claims=keys, error=str(error), nodes_tried=tried
                ), []
            if outcome.allocations is None:
                reasons[outcome.reason] = reasons.get(outcome.reason, 0) + 1
                continue
            if fit is None:
                fit = (tried, node, outcome)
            if not self.settings.filter_every_node:
                break
        if fit is not None:
            tried, node, outcome = fit
            assert outcome.allocations is not None
            results = []
            for claim, allocation in zip(pending, outcome.allocations, strict=True):
                self._hold(claim, allocation)
                done = replace(claim, allocation=allocation)
                self.done[claim.key] = done
                self.claim_nodes[claim.key] = node.name
                results.append(
                    ClaimOutcome(
                        claim=done,
                        status="allocated",
                        node=node.name,
                        allocation=allocation,
                        nodes_tried=tried,
                        eviction=self._eviction(allocation),
                    )
                )
            return PodOutcome(
                pod, "scheduled", node=node.name, claims=keys, nodes_tried=tried
            ), results
        summary = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        return PodOutcome(
            pod,
            "unschedulable",
            claims=keys,
            error=f"cannot allocate all claims of the pod on any one node "
            f"(0/{len(self.nodes)} nodes: {summary or 'none'})",
            nodes_tried=len(self.nodes),
        ), [
            ClaimOutcome(
                claim=claim,
                status="unschedulable",
                error=f"pod {pod.key} did not fit",
                nodes_tried=len(self.nodes),
            )
            for claim in pending
        ]

    def _eviction(self, allocation: model.AllocationResult) -> str | None:
        """Why the device taint eviction controller evicts the claim's pods. The scheduler
        lets a toleration without an effect take a NoExecute-tainted device, but before
        1.38 the controller counts only ``effect: NoExecute`` tolerations and evicts the
        pod right after binding (see ``eviction``)."""
        if not self.settings.allocator.features.device_taints:
            return None
        return eviction.eviction(allocation, self.devices, settings=self.settings.evictions)

    def _reachable(self, claim: model.ResourceClaim, node: model.Node) -> bool:
        """Whether a pod on ``node`` can use a claim allocated before it."""
        allocated_on = self.claim_nodes.get(claim.key)
        if allocated_on is not None:
            return allocated_on in (node.name, ANY_NODE)
        selector = claim.allocation.node_selector if claim.allocation else None
        return selector is None or nodes.node_selector_matches(selector, node)

    def claim(self, claim: model.ResourceClaim) -> ClaimOutcome:
        missing = None if claim.allocation else self.allocator.missing_class(claim)
        if missing is not None:
            return ClaimOutcome(claim=claim, status="unschedulable", error=missing)
        problem = None if claim.allocation else self.allocator.claim_limit_problem(claim)
        if problem is not None:
            return ClaimOutcome(claim=claim, status="error", error=problem)
        if claim.allocation is not None:
            return ClaimOutcome(
                claim=claim,
                status="already-allocated",
                allocation=claim.allocation,
                eviction=self._eviction(claim.allocation),
            )
        explained: list[allocator.NodeAllocation] = []
        quick = _needs_a_free_device(claim)
        # Nodes only fill up during a run: a claim that needs a free device can start at
        # the first node that still had one (unless it must explain every node it skips).
        first = self._first_open if quick and not self.explain else 0
        for tried, node in enumerate(self.nodes[first:], start=first + 1):
            node_pools = self.inventory.for_node(node)
            if quick and self._free_devices(node_pools) == 0:
                if tried - 1 == self._first_open:
                    self._first_open += 1
                if self.explain and len(explained) < self.settings.max_explained_nodes:
                    explained.append(
                        allocator.NodeAllocation(
                            node=node.name, allocations=None, notes=(*node_pools.notes, ALL_IN_USE)
                        )
                    )
                continue
            try:
                outcome = self.allocator.allocate(
                    [claim], node_pools=node_pools, in_use=self.in_use, explain=self.explain
                )
            except allocator.AllocationError as error:
                return ClaimOutcome(
                    claim=claim,
                    status="error",
                    node=node.name,
                    error=str(error),
                    nodes_tried=tried,
                    explanations=tuple(explained),
                )
            if outcome.allocations is not None:
                allocation = outcome.allocations[0]
                self._hold(claim, allocation)
                return ClaimOutcome(
                    claim=claim,
                    status="allocated",
                    node=node.name,
                    allocation=allocation,
                    nodes_tried=tried,
                    eviction=self._eviction(allocation),
                    explanations=(outcome,) if self.explain else (),
                )
            if self.explain and len(explained) < self.settings.max_explained_nodes:
                explained.append(outcome)
        return ClaimOutcome(
            claim=claim,
            status="unschedulable",
            error="cannot allocate all claims",
            nodes_tried=len(self.nodes),
            explanations=tuple(explained),
        )


def simulate(
    inputs: manifests.Inputs,
    *,
    node_name: str | None = None,
    explain: bool = False,
    engine: cel.CelEngine | None = None,
    settings: SimulationSettings | None = None,
) -> SimulationReport:
    """Allocate every unallocated claim of ``inputs`` in turn, as the scheduler would."""
    settings = settings or SimulationSettings()
    features = settings.allocator.features
    run = _Run(
        inputs,
        node_name=node_name,
        explain=explain,
        engine=engine
        or cel.CelEngine(
            list_type_attributes=features.list_type_attributes,
            consumable_capacity=features.consumable_capacity,
        ),
        settings=settings,
    )
    by_key = {claim.key: claim for claim in inputs.claims}
    pod_outcomes: list[PodOutcome] = []
    outcomes: list[ClaimOutcome] = []
    ignored = list(inputs.ignored)
    for pod in inputs.pods:
        if not pod.claims and extended.claim_for(pod, inputs.classes) == (None, ()):
            # Extended resources no class backs: a device plugin's, not simulated.
            ignored.append(f"Pod {pod.key}")
            continue
        pod_outcome, claim_outcomes = run.pod(pod, by_key, inputs.templates)
        pod_outcomes.append(pod_outcome)
        outcomes.extend(claim_outcomes)
    used = {
        f"{pod.namespace}/{ref.claim_name or ref.template_name}"
        for pod in inputs.pods
        for ref in pod.claims
    }
    outcomes.extend(run.claim(claim) for claim in inputs.claims if claim.key not in used)
    return SimulationReport(
        outcomes=tuple(outcomes), ignored=tuple(ignored), pods=tuple(pod_outcomes)
    )
