"""Pools as one node sees them: which slices count, which generation wins, which are whole.

Owns ``GatherPools``: a slice is visible from a node by ``nodeName``, ``nodeSelector``,
``allNodes`` or (``perDeviceNodeSelection``) any one of its devices; slices are grouped
by (driver, pool); only the newest generation is kept. When fewer slices are visible
than ``resourceSliceCount``, the pool's slices on other nodes are counted too: the pool
is complete when they make up the count, left out when another node sees a newer
generation, and incomplete otherwise. A pool with a device name twice, a counter set
name twice, or a device consuming a counter its pool lacks is invalid. Pools whose
devices carry binding conditions are searched last. Unlike a 1.32 scheduler, whose
order is random, pools come out sorted by (driver, pool name) and slices by name, so a
dry run is repeatable. ``Inventory`` indexes slices by node once and caches each
node's view.

Facts: k8s.io/dynamic-resource-allocation v0.37.2, structured/internal/incubating
(GatherPools, buildPool, checkSlicesInPool): the 1.36+ default allocator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

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
    complete_elsewhere: bool = False
    """Slices on other nodes make up ``resourceSliceCount``."""
    counter_sets: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)
    """The pool's shared counters (from every slice of the generation)."""
    other_devices: tuple[model.Device, ...] = ()
    """Devices of the pool's slices not visible from this node: their allocations
    still use up the pool's counters."""

    @property
    def incomplete(self) -> bool:
        """Not every slice of the generation is published yet."""
        return not self.complete_elsewhere and len(self.slices) != self.resource_slice_count

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions for s in self.slices for d in s.devices)

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


def _node_matches(
    node: model.Node,
    node_name: str | None,
    node_selector: model.NodeSelector | None,
    all_nodes: bool,
) -> bool:
    if node_name is not None:
        return node_name == node.name
    if node_selector is not None:
        return nodes.node_selector_matches(node_selector, node)
    return all_nodes


def device_visible(slice_: model.ResourceSlice, device: model.Device, node: model.Node) -> bool:
    """Whether ``node`` may use ``device`` (always, unless per-device node selection)."""
    if not slice_.per_device_node_selection:
        return True
    return _node_matches(node, device.node_name, device.node_selector, device.all_nodes)


def _visible(slice_: model.ResourceSlice, node: model.Node) -> bool:
    if slice_.per_device_node_selection:
        return any(device_visible(slice_, d, node) for d in slice_.devices)
    return _node_matches(node, slice_.node_name, slice_.node_selector, slice_.all_nodes)


def _invalid(slices: Sequence[model.ResourceSlice], counters: bool) -> str | None:
    seen: set[str] = set()
    for slice_ in slices:
        for device in slice_.devices:
            if device.name in seen:
                return f"duplicate device name {device.name}"
            seen.add(device.name)
    if not counters:
        return None
    sets: dict[str, Mapping[str, Fraction]] = {}
    for slice_ in slices:
        for name, counter_set in slice_.shared_counters.items():
            if name in sets:
                return f"duplicate counter set name {name}"
            sets[name] = counter_set
    for slice_ in slices:
        for device in slice_.devices:
            for use in device.consumes_counters:
                if use.counter_set not in sets:
                    return f"counter set {use.counter_set} not found"
                for counter in use.counters:
                    if counter not in sets[use.counter_set]:
                        return f"counter {counter} not found in counter set {use.counter_set}"
    return None


def _pool(
    key: tuple[str, str],
    slices: list[model.ResourceSlice],
    everywhere: Sequence[model.ResourceSlice],
    notes: list[str],
    *,
    counters: bool,
) -> Pool | None:
    newest = max(s.generation for s in slices)
    kept = sorted((s for s in slices if s.generation == newest), key=lambda s: s.name)
    label = f"{key[0]}/{key[1]}"
    for old in sorted((s for s in slices if s.generation != newest), key=lambda s: s.name):
        notes.append(
            f"pool {label}: slice {old.name} ignored, generation {old.generation} is older "
            f"than {newest}"
        )
    count = kept[0].resource_slice_count
    others: list[model.ResourceSlice] = []
    complete_elsewhere = False
    if len(kept) != count:
        if any(s.generation > newest for s in everywhere):
            notes.append(f"pool {label}: left out, another node sees a newer generation")
            return None
        names = {s.name for s in kept}
        same = [s for s in everywhere if s.generation == newest]
        if len(same) == count:
            complete_elsewhere = True
            others = sorted((s for s in same if s.name not in names), key=lambda s: s.name)
    all_slices = [*kept, *others]
    invalid = _invalid(all_slices, counters)
    counter_sets = {
        name: counter_set for s in all_slices for name, counter_set in s.shared_counters.items()
    }
    pool = Pool(
        driver=key[0],
        name=key[1],
        generation=newest,
        resource_slice_count=count,
        slices=tuple(kept),
        invalid_reason=invalid,
        complete_elsewhere=complete_elsewhere,
        counter_sets=counter_sets if counters else {},
        other_devices=tuple(d for s in others for d in s.devices),
    )
    if pool.incomplete:
        notes.append(
            f"pool {label}: incomplete, {len(kept)} of {pool.resource_slice_count} slices "
            f"at generation {newest}"
        )
    if invalid is not None:
        notes.append(f"pool {label}: invalid, {invalid}")
    return pool


def gather_pools(
    slices: Iterable[model.ResourceSlice],
    node: model.Node,
    *,
    everywhere: Mapping[tuple[str, str], Sequence[model.ResourceSlice]] | None = None,
    partitionable: bool = False,
) -> NodePools:
    """The pools and devices ``node`` can use, in the deterministic search order.

    ``everywhere`` holds every slice of each pool (on any node), to judge a pool that
    spans nodes; ``partitionable`` is the DRAPartitionableDevices feature: without it
    slices with shared counters or per-device node selection are not seen.
    """
    grouped: dict[tuple[str, str], list[model.ResourceSlice]] = defaultdict(list)
    for slice_ in slices:
        if not partitionable and (slice_.per_device_node_selection or slice_.shared_counters):
            continue
        if _visible(slice_, node):
            grouped[(slice_.driver, slice_.pool)].append(slice_)
    notes: list[str] = []
    found = [
        _pool(key, grouped[key], (everywhere or {}).get(key, ()), notes, counters=partitionable)
        for key in sorted(grouped)
    ]
    kept = [p for p in found if p is not None]
    pools = tuple(
        [p for p in kept if not p.has_binding_conditions]
        + [p for p in kept if p.has_binding_conditions]
    )
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
    """All slices, indexed by node and by pool once; each node's pools are gathered once
    and cached."""

    def __init__(
        self, slices: Iterable[model.ResourceSlice], *, partitionable: bool = False
    ) -> None:
        self._by_node: dict[str, list[model.ResourceSlice]] = defaultdict(list)
        self._shared: list[model.ResourceSlice] = []
        self._by_pool: dict[tuple[str, str], list[model.ResourceSlice]] = defaultdict(list)
        self._partitionable = partitionable
        self._device_nodes: set[str] = set()
        for slice_ in slices:
            self._by_pool[(slice_.driver, slice_.pool)].append(slice_)
            if slice_.per_device_node_selection:
                self._device_nodes.update(d.node_name for d in slice_.devices if d.node_name)
            if slice_.node_name is not None:
                self._by_node[slice_.node_name].append(slice_)
            else:
                self._shared.append(slice_)
        self._cache: dict[str, NodePools] = {}

    @property
    def node_names(self) -> tuple[str, ...]:
        """Nodes named by some slice's (or per-device) ``nodeName``, sorted."""
        return tuple(sorted(self._by_node.keys() | self._device_nodes))

    def for_node(self, node: model.Node) -> NodePools:
        cached = self._cache.get(node.name)
        if cached is None:
            cached = gather_pools(
                [*self._by_node.get(node.name, ()), *self._shared],
                node,
                everywhere=self._by_pool,
                partitionable=self._partitionable,
            )
            self._cache[node.name] = cached
        return cached
