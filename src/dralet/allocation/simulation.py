"""A dry run of scheduling: each claim in turn, on the first node where it fits.

Owns the loop the scheduler's Filter runs for a pod, applied to each unallocated
ResourceClaim in the order given: nodes are tried in name order (or only the one
asked for), the first node where the claim fits wins, and its devices count as in
use for the claims after it. Claims that already have ``status.allocation`` hold
their devices from the start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from dralet.allocation import allocator, cel, manifests, model, pools

__all__ = [
    "ANY_NODE",
    "ClaimOutcome",
    "SimulationReport",
    "SimulationSettings",
    "allocated_devices",
    "simulate",
]

ANY_NODE = ""
"""The node name used when no node is known (only allNodes slices, no Node objects)."""
ALL_IN_USE = "every device visible from this node is in use"

Status = Literal["allocated", "already-allocated", "unschedulable", "error"]


@dataclass(frozen=True)
class SimulationSettings:
    """How the dry run behaves."""

    allocator: allocator.AllocatorSettings = field(default_factory=allocator.AllocatorSettings)
    """The simulated scheduler's own settings."""
    max_explained_nodes: int = 5
    """Nodes whose rejections are kept per claim when explaining a claim that did not fit."""


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


@dataclass(frozen=True)
class SimulationReport:
    """Every claim's outcome, in input order."""

    outcomes: tuple[ClaimOutcome, ...]
    search_order: str = pools.SEARCH_ORDER
    ignored: tuple[str, ...] = ()

    @property
    def all_allocated(self) -> bool:
        return all(o.status in ("allocated", "already-allocated") for o in self.outcomes)


def allocated_devices(claims: Iterable[model.ResourceClaim]) -> dict[model.DeviceId, str]:
    """Devices held by claims' ``status.allocation``; adminAccess results hold nothing."""
    held: dict[model.DeviceId, str] = {}
    for claim in claims:
        if claim.allocation is None:
            continue
        for result in claim.allocation.results:
            if not result.admin_access:
                held[result.device_id] = claim.key
    return held


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
        self.inventory = pools.Inventory(inputs.slices)
        self.nodes = _nodes(inputs, self.inventory, node_name)
        self.allocator = allocator.Allocator(
            inputs.classes, engine=engine, settings=settings.allocator
        )
        self.allocated = allocated_devices(inputs.claims)
        self.explain = explain
        self.settings = settings
        self._free: dict[str, int] = {}
        """Per node visited so far: how many of the devices it sees are not in use."""
        self._seen_by: dict[model.DeviceId, list[str]] = {}

    def _free_devices(self, node_pools: pools.NodePools) -> int:
        name = node_pools.node.name
        free = self._free.get(name)
        if free is None:
            free = 0
            for candidate in node_pools.candidates:
                self._seen_by.setdefault(candidate.device_id, []).append(name)
                free += candidate.device_id not in self.allocated
            self._free[name] = free
        return free

    def _hold(self, device_id: model.DeviceId, claim: model.ResourceClaim) -> None:
        if device_id in self.allocated:
            return
        self.allocated[device_id] = claim.key
        for name in self._seen_by.get(device_id, ()):
            self._free[name] -= 1

    def claim(self, claim: model.ResourceClaim) -> ClaimOutcome:
        if claim.allocation is not None:
            return ClaimOutcome(
                claim=claim, status="already-allocated", allocation=claim.allocation
            )
        explained: list[allocator.NodeAllocation] = []
        quick = _needs_a_free_device(claim)
        for tried, node in enumerate(self.nodes, start=1):
            node_pools = self.inventory.for_node(node)
            if quick and self._free_devices(node_pools) == 0:
                if self.explain and len(explained) < self.settings.max_explained_nodes:
                    explained.append(
                        allocator.NodeAllocation(
                            node=node.name, allocations=None, notes=(*node_pools.notes, ALL_IN_USE)
                        )
                    )
                continue
            try:
                outcome = self.allocator.allocate(
                    [claim], node_pools=node_pools, allocated=self.allocated, explain=self.explain
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
                for result in allocation.results:
                    if not result.admin_access:
                        self._hold(result.device_id, claim)
                return ClaimOutcome(
                    claim=claim,
                    status="allocated",
                    node=node.name,
                    allocation=allocation,
                    nodes_tried=tried,
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
    run = _Run(
        inputs,
        node_name=node_name,
        explain=explain,
        engine=engine or cel.CelEngine(),
        settings=settings or SimulationSettings(),
    )
    return SimulationReport(
        outcomes=tuple(run.claim(claim) for claim in inputs.claims), ignored=inputs.ignored
    )
