"""Pools as one node sees them: which slices count, which generation wins, which are whole.

Owns ``GatherPools``: a slice is visible from a node by ``nodeName``, ``nodeSelector``
or ``allNodes``; slices are grouped by (driver, pool); only the newest generation is
kept; a pool with fewer slices than ``resourceSliceCount`` is incomplete, and one with
a device name twice is invalid. Unlike a 1.32 scheduler, whose order is random, pools
come out sorted by (driver, pool name) and slices by name, so a dry run is repeatable.
``Inventory`` indexes slices by node once and caches each node's view.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from dralet.allocation import model, nodes

__all__ = ["SEARCH_ORDER", "Candidate", "Inventory", "NodePools", "Pool", "gather_pools"]

SEARCH_ORDER = (
    "pools by driver and pool name, slices by name, devices in slice order "
    "(a 1.32 scheduler visits pools and slices in random order and may pick other, "
    "equivalent devices)"
)


@dataclass(frozen=True)
class Pool:
    """The slices of one (driver, pool) at its newest generation seen from a node."""

    driver: str
    name: str
    generation: int
    resource_slice_count: int
    slices: tuple[model.ResourceSlice, ...]
    invalid_reason: str | None = None

    @property
    def incomplete(self) -> bool:
        """Not every slice of the generation is visible (or published yet)."""
        return len(self.slices) != self.resource_slice_count

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"


@dataclass(frozen=True)
class Candidate:
    """One device visible from a node, in search order."""

    index: int
    device_id: model.DeviceId
    device: model.Device
    pool: Pool
    slice: model.ResourceSlice


@dataclass(frozen=True)
class NodePools:
    """What one node sees: its pools and every device in them, in search order."""

    node: model.Node
    pools: tuple[Pool, ...]
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()
    """Pool-level facts worth explaining: outdated slices ignored, incomplete or invalid pools."""


def _visible(slice_: model.ResourceSlice, node: model.Node) -> bool:
    if slice_.node_name is not None:
        return slice_.node_name == node.name
    if slice_.node_selector is not None:
        return nodes.node_selector_matches(slice_.node_selector, node)
    return slice_.all_nodes


def _pool(key: tuple[str, str], slices: list[model.ResourceSlice], notes: list[str]) -> Pool:
    newest = max(s.generation for s in slices)
    kept = sorted((s for s in slices if s.generation == newest), key=lambda s: s.name)
    label = f"{key[0]}/{key[1]}"
    for old in sorted((s for s in slices if s.generation != newest), key=lambda s: s.name):
        notes.append(
            f"pool {label}: slice {old.name} ignored, generation {old.generation} is older "
            f"than {newest}"
        )
    seen: set[str] = set()
    invalid: str | None = None
    for slice_ in kept:
        for device in slice_.devices:
            if device.name in seen and invalid is None:
                invalid = f"duplicate device name {device.name}"
            seen.add(device.name)
    pool = Pool(
        driver=key[0],
        name=key[1],
        generation=newest,
        resource_slice_count=kept[0].resource_slice_count,
        slices=tuple(kept),
        invalid_reason=invalid,
    )
    if pool.incomplete:
        notes.append(
            f"pool {label}: incomplete, {len(kept)} of {pool.resource_slice_count} slices "
            f"at generation {newest}"
        )
    if invalid is not None:
        notes.append(f"pool {label}: invalid, {invalid}")
    return pool


def gather_pools(slices: Iterable[model.ResourceSlice], node: model.Node) -> NodePools:
    """The pools and devices ``node`` can use, in the deterministic search order."""
    grouped: dict[tuple[str, str], list[model.ResourceSlice]] = defaultdict(list)
    for slice_ in slices:
        if _visible(slice_, node):
            grouped[(slice_.driver, slice_.pool)].append(slice_)
    notes: list[str] = []
    pools = tuple(_pool(key, grouped[key], notes) for key in sorted(grouped))
    candidates: list[Candidate] = []
    for pool in pools:
        for slice_ in pool.slices:
            for device in slice_.devices:
                device_id = model.DeviceId(pool.driver, pool.name, device.name)
                candidates.append(
                    Candidate(
                        index=len(candidates),
                        device_id=device_id,
                        device=device,
                        pool=pool,
                        slice=slice_,
                    )
                )
    return NodePools(node=node, pools=pools, candidates=tuple(candidates), notes=tuple(notes))


class Inventory:
    """All slices, indexed by node once; each node's pools are gathered once and cached."""

    def __init__(self, slices: Iterable[model.ResourceSlice]) -> None:
        self._by_node: dict[str, list[model.ResourceSlice]] = defaultdict(list)
        self._shared: list[model.ResourceSlice] = []
        for slice_ in slices:
            if slice_.node_name is not None:
                self._by_node[slice_.node_name].append(slice_)
            else:
                self._shared.append(slice_)
        self._cache: dict[str, NodePools] = {}

    @property
    def node_names(self) -> tuple[str, ...]:
        """Nodes named by some slice's ``nodeName``, sorted."""
        return tuple(sorted(self._by_node))

    def for_node(self, node: model.Node) -> NodePools:
        cached = self._cache.get(node.name)
        if cached is None:
            cached = gather_pools([*self._by_node.get(node.name, ()), *self._shared], node)
            self._cache[node.name] = cached
        return cached
