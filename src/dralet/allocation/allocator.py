"""The structured allocator: which devices of one node satisfy a set of claims.

Owns the scheduler's search as specified for Kubernetes 1.32 and later: per claim and
request, device class selectors then request selectors (CEL, each expression compiled
once), ExactCount and All, firstAvailable alternatives in order, ``matchAttribute``
constraints across requests, adminAccess, devices already allocated to other claims
left alone, depth-first search with backtracking where the first full solution wins.
With the 1.36+ features on (``features``): a pool's shared counters are never
over-used, devices tainted NoSchedule/NoExecute go only to requests that tolerate the
taint, a device that allows multiple allocations is shared while its capacity lasts
(each share gets a ``shareID`` and ``consumedCapacity``), ``distinctAttribute``
constraints, and binding conditions carried into the results. Facts:
k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/incubating.

Three outcomes, kept apart as the scheduler does: a fit (one ``AllocationResult`` per
claim), no fit on this node (the scheduler's Unschedulable "cannot allocate all claims",
or "invalid resource pools were encountered" when the node sees an invalid pool:
ExactCount requests skip incomplete and invalid pools), and
``AllocationError`` for input the scheduler refuses outright (its framework.Error:
a CEL error, a missing class, All over an incomplete pool, too many devices).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from dralet import errors
from dralet.allocation import capacity, cel, model, pools
from dralet.allocation.features import Features
from dralet.allocation.inuse import InUse

__all__ = [
    "AllocationError",
    "Allocator",
    "AllocatorSettings",
    "NodeAllocation",
    "Rejection",
]

BACKTRACKED = "picked, then given back: the requests after it could not be satisfied"
NOT_SELECTABLE = "no device fields (v1beta1 device without `basic`): not selectable"
NOT_FOR_THIS_NODE = "per-device node selection: not for this node"
BINDING_OFF = "has binding conditions, and the DRADeviceBindingConditions feature is off"
COUNTERS_OFF = "consumes counters, and the DRAPartitionableDevices feature is off"
COUNTERS_USED_UP = "its pool's shared counters would be over-used"
PREVENTING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep a device from a request that does not tolerate them; others
(``None``, unknown ones) do not."""
NO_FIT = "cannot allocate all claims"
"""The scheduler's Unschedulable reason when the claims do not fit a node."""
INVALID_POOLS = "invalid resource pools were encountered"
"""The reason when they do not fit and the node sees an invalid pool."""
_SHARE_IDS = uuid.UUID("5f3d1c2e-8f4a-4b7e-9a51-6d2c0e7b9a10")


class AllocationError(errors.PermanentError):
    """Input the scheduler refuses outright: scheduling the pod is aborted, not retried here."""


class _FailedOnNode(Exception):
    """The claims cannot be allocated on this node, whatever other nodes hold (the
    scheduler's ErrFailedAllocationOnNode)."""


@dataclass(frozen=True)
class AllocatorSettings:
    """How the simulated scheduler behaves."""

    admin_access_enabled: bool = True
    """The DRAAdminAccess feature gate (alpha in 1.32): off makes any adminAccess an error."""
    all_mode_needs_a_device: bool = False
    """An All request matching nothing fails (1.33 and later) instead of allocating none (1.32)."""
    max_devices_per_claim: int = 32
    """AllocationResultsMaxSize: more devices in one claim is an error."""
    max_search_steps: int = 1_000_000
    """Devices tried before the search gives up with an error (the real one has a timeout)."""
    cache_selector_results: bool = True
    """Remember whether a device passes a class's and request's selectors across calls."""
    features: Features = field(default_factory=Features)
    """The DRA feature gates of the simulated release (all off: 1.35 and older)."""
    qualified_capacity_names: bool = False
    """Capacity requests may name a capacity with or without the driver's domain (1.38)."""
    skip_unusable_pools: bool = False
    """ExactCount requests skip incomplete and invalid pools, and an invalid pool fails only
    its node (1.35 and later); before, an incomplete pool is used and an invalid one aborts."""
    all_mode_unusable_pool_fails_node: bool = False
    """An All request on a node with an incomplete or invalid pool fails that node alone
    (1.38); before, it aborts the pod."""


@dataclass(frozen=True)
class Rejection:
    """Why a device was not chosen for a request (the last reason met in the search)."""

    claim: str
    request: str
    device: model.DeviceId
    reason: str


@dataclass(frozen=True)
class NodeAllocation:
    """The outcome on one node: ``allocations`` is None when the claims do not fit there."""

    node: str
    allocations: tuple[model.AllocationResult, ...] | None
    rejections: tuple[Rejection, ...] = ()
    notes: tuple[str, ...] = ()
    reason: str = ""
    """Why the claims do not fit here, in the scheduler's words (empty when they fit)."""

    @property
    def fits(self) -> bool:
        return self.allocations is not None


_LIST_GATE_HINT = "list values are compared only with the DRAListTypeAttributes feature gate"


@dataclass(frozen=True)
class _AttributeValue:
    """A device's value of one attribute, as constraints compare it."""

    kind: str
    """The scalar kind: string, int, bool or version."""
    items: frozenset[Any]
    """The value as a set: one item for a scalar, the distinct items of a list."""
    listed: bool

    def __str__(self) -> str:
        if self.listed:
            return f"{self.kind} list {sorted(self.items, key=str)!r}"
        return f"{self.kind} {next(iter(self.items))!r}"

    def common(self, other: _AttributeValue) -> frozenset[Any]:
        """The items both hold (none when their kinds differ)."""
        return self.items & other.items if self.kind == other.kind else frozenset()


def _attribute(candidate: pools.Candidate, qualified: str) -> _AttributeValue | None:
    """A device's value of a fully qualified attribute, if it has one."""
    attributes = candidate.device.attributes
    raw = attributes.get(qualified)
    if raw is None:
        domain, _, identifier = qualified.partition("/")
        if domain == candidate.device_id.driver:
            raw = attributes.get(identifier)
    if raw is None:
        return None
    for listed, kind in cel.LIST_KINDS.items():
        values = raw.get(listed)
        if isinstance(values, list):
            return _AttributeValue(kind, frozenset(values), listed=True)
    for kind in cel.SCALAR_KINDS:
        if raw.get(kind) is not None:
            return _AttributeValue(kind, frozenset((raw[kind],)), listed=False)
    return None


class _Constraint(Protocol):
    def applies(self, alternative: _Alternative) -> bool: ...
    def add(self, candidate: pools.Candidate) -> str | None: ...
    def remove(self) -> None: ...


def _applies(requests: frozenset[str] | None, alternative: _Alternative) -> bool:
    return (
        requests is None or alternative.sub.name in requests or alternative.request.name in requests
    )


@dataclass
class _DistinctAttribute:
    """A distinctAttribute constraint: no two devices of its requests share the value (with
    list-type attributes: the devices' value sets are pairwise disjoint)."""

    attribute: str
    requests: frozenset[str] | None
    list_values: bool
    """The DRAListTypeAttributes gate: values are compared as sets."""
    values: list[_AttributeValue] = field(default_factory=list)

    def applies(self, alternative: _Alternative) -> bool:
        return _applies(self.requests, alternative)

    def add(self, candidate: pools.Candidate) -> str | None:
        found = _attribute(candidate, self.attribute)
        name = f"constraint distinctAttribute {self.attribute}"
        if found is None:
            return f"{name}: device has no such attribute"
        if self.list_values and not found.items:
            return f"{name}: the device's {found} is empty"
        if not self.list_values and found.listed and self.values:
            return f"{name}: the device has a {found}; {_LIST_GATE_HINT}"
        for taken in self.values:
            if taken.listed and not self.list_values:
                continue
            if found.common(taken):
                return f"{name}: {found} shares a value with {taken} of a device picked"
        self.values.append(found)
        return None

    def remove(self) -> None:
        self.values.pop()


@dataclass
class _MatchAttribute:
    """A matchAttribute constraint during one search: the first device fixes the value (with
    list-type attributes: the devices' value sets keep a common element)."""

    attribute: str
    requests: frozenset[str] | None
    list_values: bool
    """The DRAListTypeAttributes gate: values are compared as sets."""
    common: list[_AttributeValue] = field(default_factory=list)
    """What the devices picked so far have in common, one entry per device (popped on remove)."""

    def applies(self, alternative: _Alternative) -> bool:
        return _applies(self.requests, alternative)

    def add(self, candidate: pools.Candidate) -> str | None:
        found = _attribute(candidate, self.attribute)
        name = f"constraint matchAttribute {self.attribute}"
        if found is None:
            return f"{name}: device has no such attribute"
        if self.list_values and not found.items:
            return f"{name}: the device's {found} is empty"
        if self.common:
            current = self.common[-1]
            if not self.list_values and (found.listed or current.listed):
                return f"{name}: {found} cannot be compared with {current}; {_LIST_GATE_HINT}"
            shared = found.common(current)
            if not shared:
                return f"{name}: {found} differs from {current} of the devices already picked"
            found = _AttributeValue(current.kind, shared, listed=current.listed or found.listed)
        self.common.append(found)
        return None

    def remove(self) -> None:
        self.common.pop()


@dataclass
class _Alternative:
    """One way to satisfy a request, prepared for the search."""

    request: model.DeviceRequest
    sub: model.DeviceSubRequest
    device_class: model.DeviceClass
    class_selectors: tuple[cel.CompiledSelector, ...]
    request_selectors: tuple[cel.CompiledSelector, ...]
    count: int
    all_devices: tuple[pools.Candidate, ...] | None = None
    unsatisfiable: str | None = None

    @property
    def admin(self) -> bool:
        return bool(self.sub.admin_access)

    @functools.cached_property
    def selector_key(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        return (
            self.device_class.name,
            tuple(s.expression for s in self.class_selectors),
            tuple(s.expression for s in self.request_selectors),
        )


@dataclass
class _Pick:
    """One device picked in the search, and what picking it took (undone on give-back)."""

    result: model.DeviceRequestAllocationResult
    candidate: pools.Candidate
    constraints: list[_Constraint]
    counters: bool
    consumed: dict[str, Fraction] | None
    """Set for a share of a device that allows multiple allocations."""


@dataclass
class _PreparedClaim:
    claim: model.ResourceClaim
    requests: list[list[_Alternative]]
    constraints: list[_Constraint]
    picked: list[_Pick] = field(default_factory=list)
    chosen: dict[int, _Alternative] = field(default_factory=dict)


class Allocator:
    """Allocates claims on one node at a time against a fixed set of DeviceClasses."""

    def __init__(
        self,
        classes: Iterable[model.DeviceClass],
        *,
        engine: cel.CelEngine,
        settings: AllocatorSettings | None = None,
    ) -> None:
        self._classes = {c.name: c for c in classes}
        self._engine = engine
        self.settings = settings or AllocatorSettings()
        self._selectable: dict[tuple[Any, ...], bool] = {}
        self._compiled_sets: dict[tuple[str, ...], tuple[cel.CompiledSelector, ...]] = {}
        """Compiled selector lists by their expressions (one lookup per request)."""

    def allocate(
        self,
        claims: Sequence[model.ResourceClaim],
        *,
        node_pools: pools.NodePools,
        in_use: InUse,
        explain: bool = False,
    ) -> NodeAllocation:
        """Devices for every claim from this node's pools, or None if they do not all fit.

        ``in_use`` holds what other claims' ``status.allocation`` take. Raises
        ``AllocationError`` where the scheduler would give up on the pod.
        """
        search = _Search(self, node_pools=node_pools, in_use=in_use, explain=explain)
        try:
            prepared = [self._prepare(claim, node_pools, search) for claim in claims]
        except _FailedOnNode as failure:
            return NodeAllocation(
                node=node_pools.node.name,
                allocations=None,
                notes=node_pools.notes,
                reason=str(failure),
            )
        search.claims = prepared
        fits = search.claim(0)
        allocations = tuple(self._result(p, node_pools.node) for p in prepared) if fits else None
        reason = "" if fits else NO_FIT
        # An invalid pool fails the node alone (ErrFailedAllocationOnNode), and only when
        # the claims do not fit without it: k8s.io/dynamic-resource-allocation@v0.37.2
        # structured/internal/incubating/allocator_incubating.go (Allocate, after allocateOne).
        skips_pools = self.settings.skip_unusable_pools
        if not fits and skips_pools and any(p.invalid_reason is not None for p in node_pools.pools):
            reason = INVALID_POOLS
        return NodeAllocation(
            node=node_pools.node.name,
            allocations=allocations,
            rejections=tuple(search.rejections.values()),
            notes=node_pools.notes,
            reason=reason,
        )

    def missing_class(self, claim: model.ResourceClaim) -> str | None:
        """The scheduler's PreFilter reason when a request (or any firstAvailable entry)
        names a DeviceClass that does not exist: the pod is Unschedulable, not an error
        (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
        dynamicresources.go, validateDeviceClass)."""
        for request in claim.requests:
            for sub in request.alternatives:
                name = sub.device_class_name
                if name not in self._classes:
                    return f"request {sub.name}: device class {name} does not exist"
        return None

    def claim_limit_problem(self, claim: model.ResourceClaim) -> str | None:
        """Why a claim asks for more devices than one claim may hold, before any node is
        tried (ExactCount requests; All is counted per node during the search)."""
        needed = 0
        for request in claim.requests:
            counts = [
                alt.count
                for alt in request.alternatives
                if alt.allocation_mode == model.EXACT_COUNT
            ]
            if len(counts) == len(request.alternatives) and counts:
                needed += min(counts)
        if needed > self.settings.max_devices_per_claim:
            return self._limit_message(claim, needed)
        return None

    def _limit_message(self, claim: model.ResourceClaim, needed: int) -> str:
        return (
            f"claim {claim.key}: number of requested devices {needed} exceeds the claim "
            f"limit of {self.settings.max_devices_per_claim} (AllocationResultsMaxSize)"
        )

    # --- set-up ---------------------------------------------------------------------

    def _compile(
        self, expressions: Sequence[str], *, owner: str
    ) -> tuple[cel.CompiledSelector, ...]:
        key = tuple(expressions)
        known = self._compiled_sets.get(key)
        if known is not None:
            return known
        compiled = []
        for index, expression in enumerate(expressions):
            try:
                compiled.append(self._engine.compile(expression))
            except cel.CelCompileError as error:
                raise AllocationError(
                    f"{owner}: selector #{index}: CEL compile error: {error.message}"
                ) from None
        if self._engine.caches_compiled:
            self._compiled_sets[key] = tuple(compiled)
        return tuple(compiled)

    def _prepare(
        self, claim: model.ResourceClaim, node_pools: pools.NodePools, search: _Search
    ) -> _PreparedClaim:
        requests: list[list[_Alternative]] = []
        for request in claim.requests:
            alternatives = []
            for sub in request.alternatives:
                alternatives.append(self._alternative(claim, request, sub, node_pools, search))
            requests.append(alternatives)
        needed = sum(min(a.count for a in alts) for alts in requests if alts)
        if needed > self.settings.max_devices_per_claim:
            raise AllocationError(self._limit_message(claim, needed))
        constraints: list[_Constraint] = []
        list_values = self.settings.features.list_type_attributes
        for index, constraint in enumerate(claim.constraints):
            requests_named = frozenset(constraint.requests) if constraint.requests else None
            if constraint.match_attribute is not None:
                constraints.append(
                    _MatchAttribute(constraint.match_attribute, requests_named, list_values)
                )
            elif (
                constraint.distinct_attribute is not None
                and self.settings.features.consumable_capacity
            ):
                constraints.append(
                    _DistinctAttribute(constraint.distinct_attribute, requests_named, list_values)
                )
            else:
                raise AllocationError(
                    f"claim {claim.key}: constraint #{index}: unsupported constraint type"
                )
        return _PreparedClaim(claim=claim, requests=requests, constraints=constraints)

    def _alternative(
        self,
        claim: model.ResourceClaim,
        request: model.DeviceRequest,
        sub: model.DeviceSubRequest,
        node_pools: pools.NodePools,
        search: _Search,
    ) -> _Alternative:
        where = f"claim {claim.key}, request {sub.name}"
        if sub.admin_access is not None and not self.settings.admin_access_enabled:
            raise AllocationError(
                f"{where}: admin access is requested, but the feature is disabled"
            )
        device_class = self._classes.get(sub.device_class_name)
        if device_class is None:
            raise AllocationError(f"{where}: device class {sub.device_class_name} does not exist")
        alternative = _Alternative(
            request=request,
            sub=sub,
            device_class=device_class,
            class_selectors=self._compile(
                device_class.selectors, owner=f"class {device_class.name}"
            ),
            request_selectors=self._compile(sub.selectors, owner=f"claim {claim.key}"),
            count=sub.count,
        )
        if sub.allocation_mode == model.ALL:
            # From 1.38 this fails the node alone (ErrFailedAllocationOnNode), before it
            # aborts the pod: k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 and @v0.37.2
            # structured/internal/incubating/allocator_incubating.go (validateDeviceRequest).
            refusal: type[Exception] = (
                _FailedOnNode
                if self.settings.all_mode_unusable_pool_fails_node
                else AllocationError
            )
            for pool in node_pools.pools:
                if pool.incomplete:
                    raise refusal(
                        f"{where}: asks for all devices, but resource pool {pool.label} is "
                        "currently being updated"
                    )
                if pool.invalid_reason is not None:
                    raise refusal(
                        f"{where}: asks for all devices, but resource pool {pool.label} is "
                        "currently invalid"
                    )
            matching = tuple(
                c
                for c in node_pools.candidates
                if search.selectable(claim, alternative, c)
                and search.capacity_problem(alternative, c, static=True) is None
            )
            alternative.all_devices = matching
            alternative.count = len(matching)
            if not matching and self.settings.all_mode_needs_a_device:
                alternative.unsatisfiable = "asks for all devices, but none match"
        return alternative

    # --- selectors ------------------------------------------------------------------

    def check_selectors(
        self, claim: model.ResourceClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> bool:
        """Class selectors, then request selectors, stopping at the first false one."""
        view = candidate.device.view
        if view is None:
            return False
        # Devices with the same content share one result: a selector sees nothing else.
        key = (alternative.selector_key, view.fingerprint)
        if self.settings.cache_selector_results:
            known = self._selectable.get(key)
            if known is not None:
                return known
        result = self._evaluate(claim, alternative, view) is None
        if self.settings.cache_selector_results:
            self._selectable[key] = result
        return result

    def _evaluate(
        self, claim: model.ResourceClaim, alternative: _Alternative, view: cel.DeviceView
    ) -> str | None:
        """None when every selector passes, else which one is false (and its clause)."""
        groups = (
            (f"class {alternative.device_class.name}", alternative.class_selectors),
            (f"claim {claim.key}", alternative.request_selectors),
        )
        for owner, selectors in groups:
            for index, selector in enumerate(selectors):
                try:
                    if selector.matches(view):
                        continue
                except cel.CelRuntimeError as error:
                    raise AllocationError(
                        f"{owner}: selector #{index}: CEL runtime error: {error}"
                    ) from None
                return f"{owner}: selector #{index} is false"
        return None

    def selector_reason(
        self, claim: model.ResourceClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> str:
        """A readable reason a device failed the selectors, naming the first false clause."""
        view = candidate.device.view
        if view is None:
            return NOT_SELECTABLE
        reason = self._evaluate(claim, alternative, view) or "selectors failed"
        for selector in (*alternative.class_selectors, *alternative.request_selectors):
            if not selector.matches(view):
                clause = selector.first_false_clause(view)
                shown = clause if clause is not None else selector.expression
                return f"{reason}: {shown}"
        return reason

    # --- results --------------------------------------------------------------------

    def _result(self, prepared: _PreparedClaim, node: model.Node) -> model.AllocationResult:
        candidates = [p.candidate for p in prepared.picked]
        config: list[model.DeviceAllocationConfiguration] = []
        users: dict[str, list[str]] = {}
        for index in range(len(prepared.requests)):
            alternative = prepared.chosen.get(index)
            if alternative is not None:
                users.setdefault(alternative.device_class.name, []).append(alternative.sub.name)
        for class_name, request_names in users.items():
            for opaque in self._classes[class_name].config:
                config.append(
                    model.DeviceAllocationConfiguration(
                        source="FromClass", requests=tuple(request_names), opaque=opaque
                    )
                )
        for entry in prepared.claim.config:
            config.append(
                model.DeviceAllocationConfiguration(
                    source="FromClaim", requests=entry.requests, opaque=entry.opaque
                )
            )
        return model.AllocationResult(
            results=tuple(p.result for p in prepared.picked),
            config=tuple(config),
            node_selector=_node_selector(candidates, node),
        )


def _placement(candidate: pools.Candidate) -> tuple[str | None, model.NodeSelector | None]:
    """The node name and node selector that say where a device is usable."""
    if candidate.slice.per_device_node_selection:
        return candidate.device.node_name, candidate.device.node_selector
    return candidate.slice.node_name, candidate.slice.node_selector


def _node_selector(
    candidates: Sequence[pools.Candidate], node: model.Node
) -> model.NodeSelector | None:
    """Where the claim's devices are usable: this node (a device of one node, or one
    that binds to the node it is allocated for), the merged selectors, or anywhere."""
    for candidate in candidates:
        if _placement(candidate)[0] is not None or candidate.device.binds_to_node:
            requirement = model.NodeSelectorRequirement(
                key="metadata.name", operator="In", values=(node.name,)
            )
            return model.NodeSelector(terms=(model.NodeSelectorTerm(match_fields=(requirement,)),))
    expressions: list[model.NodeSelectorRequirement] = []
    fields: list[model.NodeSelectorRequirement] = []
    for candidate in candidates:
        selector = _placement(candidate)[1]
        if selector is None:
            continue
        for term in selector.terms:
            expressions.extend(r for r in term.match_expressions if r not in expressions)
            fields.extend(r for r in term.match_fields if r not in fields)
    if not expressions and not fields:
        return None
    term = model.NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields))
    return model.NodeSelector(terms=(term,))


def _unusable_pool(pool: pools.Pool) -> str | None:
    """Why an ExactCount request takes nothing from ``pool``: the scheduler skips
    incomplete and invalid pools there since 1.35 (k8s.io/dynamic-resource-allocation
    @v0.35.0 and @v0.37.2 structured/internal/incubating/allocator_incubating.go,
    allocateOne; @v0.34.0 does not)."""
    if pool.incomplete:
        return f"pool {pool.label} is incomplete: not searched"
    if pool.invalid_reason is not None:
        return f"pool {pool.label} is invalid ({pool.invalid_reason}): not searched"
    return None


class _Counters:
    """The shared counters of the node's pools during one search: what allocated devices
    have used up, and what the devices picked so far take."""

    def __init__(self, in_use: InUse) -> None:
        self.in_use = in_use
        self.available: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.taken: dict[str, dict[str, dict[str, Fraction]]] = {}

    def _left(self, pool: pools.Pool) -> dict[str, dict[str, Fraction]]:
        known = self.available.get(pool.label)
        if known is None:
            known = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            devices = [*(d for s in pool.slices for d in s.devices), *pool.other_devices]
            for device in devices:
                if not self.in_use.held(model.DeviceId(pool.driver, pool.name, device.name)):
                    continue
                for use in device.consumes_counters:
                    left = known.get(use.counter_set, {})
                    for name, amount in use.counters.items():
                        if name in left:
                            left[name] -= amount
            self.available[pool.label] = known
        return known

    def _add(self, candidate: pools.Candidate, sign: int) -> None:
        taken = self.taken.setdefault(candidate.pool.label, {})
        for use in candidate.device.consumes_counters:
            counters = taken.setdefault(use.counter_set, {})
            for name, amount in use.counters.items():
                counters[name] = counters.get(name, Fraction(0)) + sign * amount

    def take(self, candidate: pools.Candidate) -> bool:
        """Reserve the device's counters; False (and nothing reserved) when any counter
        of its pool would go past what is left."""
        left = self._left(candidate.pool)
        self._add(candidate, 1)
        taken = self.taken[candidate.pool.label]
        for set_name, counters in left.items():
            for name, value in counters.items():
                if value < taken.get(set_name, {}).get(name, Fraction(0)):
                    self._add(candidate, -1)
                    return False
        return True

    def give_back(self, candidate: pools.Candidate) -> None:
        self._add(candidate, -1)


class _Search:
    """The state of one depth-first search: devices being allocated, constraint values,
    counters and shares being taken."""

    def __init__(
        self,
        allocator: Allocator,
        *,
        node_pools: pools.NodePools,
        in_use: InUse,
        explain: bool,
    ) -> None:
        self.allocator = allocator
        self.features = allocator.settings.features
        self.node = node_pools.node
        self.candidates = node_pools.candidates
        self.in_use = in_use
        self.explain = explain
        self.claims: list[_PreparedClaim] = []
        self.allocating: dict[model.DeviceId, list[str]] = {}
        """Who picked each device in this search; an admin-access pick counts too, keeping
        the device from later non-admin requests of any claim (k8s.io/dynamic-resource-
        allocation@v0.37.2 structured/internal/incubating/allocator_incubating.go,
        allocateDevice marks allocatingDevices whatever the request's admin access)."""
        self.sharing: dict[model.DeviceId, list[dict[str, Fraction]]] = {}
        """Shares being taken in this search, per device."""
        self.counters = _Counters(in_use)
        self.rejections: dict[tuple[str, str, model.DeviceId], Rejection] = {}
        self.claim_picks: dict[tuple[str, model.DeviceId], str] = {}
        """(claim, device) -> request: a device allocated whole serves at most one request
        of a claim, admin access or not."""
        self.steps = 0

    def multiple(self, candidate: pools.Candidate) -> bool:
        """Whether the device is shared rather than allocated whole."""
        return self.features.consumable_capacity and candidate.device.allow_multiple_allocations

    def selectable(
        self, claim: model.ResourceClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> bool:
        reason = None
        if candidate.device.binding_conditions and not self.features.binding_conditions:
            reason = BINDING_OFF
        elif not pools.device_visible(candidate.slice, candidate.device, self.node):
            reason = NOT_FOR_THIS_NODE
        elif not self.allocator.check_selectors(claim, alternative, candidate):
            reason = self.allocator.selector_reason(claim, alternative, candidate)
        if reason is not None and self.explain:
            self._reject(claim, alternative, candidate, reason)
        return reason is None

    def _given(self, device_id: model.DeviceId) -> dict[str, Fraction]:
        given = dict(self.in_use.consumed(device_id))
        for share in self.sharing.get(device_id, ()):
            for name, amount in share.items():
                given[name] = given.get(name, Fraction(0)) + amount
        return given

    def capacity_problem(
        self, alternative: _Alternative, candidate: pools.Candidate, *, static: bool = False
    ) -> str | None:
        """Why the request's capacity does not fit the device (None when it does, or when
        consumable capacity is off); ``static`` ignores what other allocations took."""
        if not self.features.consumable_capacity:
            return None
        given = {} if static else self._given(candidate.device_id)
        try:
            requests = self._capacity_requests(alternative, candidate)
        except capacity.CapacityNameError as error:
            return str(error)
        return capacity.shortfall(candidate.device, requests, given=given)

    def _capacity_requests(
        self, alternative: _Alternative, candidate: pools.Candidate
    ) -> Mapping[str, Fraction]:
        """The request's capacity amounts under the names the device publishes."""
        requests = alternative.sub.capacity_requests
        if not self.allocator.settings.qualified_capacity_names:
            return requests
        driver = candidate.device_id.driver
        return capacity.resolve_names(candidate.device, requests, driver=driver)

    def _reject(
        self,
        claim: model.ResourceClaim,
        alternative: _Alternative,
        candidate: pools.Candidate,
        reason: str,
    ) -> None:
        if self.explain:
            key = (claim.key, alternative.sub.name, candidate.device_id)
            self.rejections[key] = Rejection(
                claim=claim.key,
                request=alternative.sub.name,
                device=candidate.device_id,
                reason=reason,
            )

    def _in_use(
        self, claim: model.ResourceClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> str | None:
        multiple = self.multiple(candidate)
        if not multiple:
            picked_by = self.claim_picks.get((claim.key, candidate.device_id))
            if picked_by is not None:
                return f"in use: already picked for request {picked_by} of this claim"
        if alternative.admin:
            return None
        holder = self.in_use.holder(
            candidate.device_id, shares_count_whole=not self.features.consumable_capacity
        )
        if holder is not None:
            return f"in use: allocated to claim {holder}"
        pickers = None if multiple else self.allocating.get(candidate.device_id)
        picker = pickers[-1] if pickers else None
        if picker is not None:
            return f"in use: already picked for {picker} in this pass"
        return None

    def _untolerated(self, alternative: _Alternative, device: model.Device) -> str | None:
        if not self.features.device_taints:
            return None
        for taint in device.taints:
            if taint.effect not in PREVENTING_EFFECTS:
                continue
            if not any(t.tolerates(taint) for t in alternative.sub.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                source = f" (DeviceTaintRule {taint.rule})" if taint.rule else ""
                return f"tainted {shown}:{taint.effect}{source}, not tolerated by the request"
        return None

    def _reserve_counters(self, candidate: pools.Candidate) -> tuple[bool, str | None]:
        """(reserved, why not usable): a shared device already in use has paid its
        counters; without the feature a device that consumes counters is unusable."""
        if not candidate.device.consumes_counters:
            return False, None
        if not self.features.partitionable_devices:
            return False, COUNTERS_OFF
        already_shared = candidate.device_id in self.in_use.shared or bool(
            self.sharing.get(candidate.device_id)
        )
        if self.multiple(candidate) and already_shared:
            return False, None
        if not self.counters.take(candidate):
            return False, COUNTERS_USED_UP
        return True, None

    def _step(self) -> None:
        self.steps += 1
        if self.steps > self.allocator.settings.max_search_steps:
            raise AllocationError(
                f"gave up after trying {self.allocator.settings.max_search_steps} devices"
            )

    def claim(self, index: int) -> bool:
        if index == len(self.claims):
            return True
        return self.request(index, 0)

    def request(self, claim_index: int, request_index: int) -> bool:
        prepared = self.claims[claim_index]
        if request_index == len(prepared.requests):
            return self.claim(claim_index + 1)
        for alternative in prepared.requests[request_index]:
            if alternative.unsatisfiable is not None:
                continue
            prepared.chosen[request_index] = alternative
            if self.slot(claim_index, request_index, alternative, slot=0, start=0):
                return True
        prepared.chosen.pop(request_index, None)
        return False

    def _constraints_add(
        self, prepared: _PreparedClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> tuple[list[_Constraint], str | None]:
        added: list[_Constraint] = []
        for constraint in prepared.constraints:
            if not constraint.applies(alternative):
                continue
            reason = constraint.add(candidate)
            if reason is not None:
                for done in reversed(added):
                    done.remove()
                return [], reason
            added.append(constraint)
        return added, None

    def _try(
        self,
        prepared: _PreparedClaim,
        alternative: _Alternative,
        candidate: pools.Candidate,
        *,
        must: bool,
    ) -> _Pick | str:
        """Take the device for the request, or say why not (in the scheduler's order:
        counters, taints, constraints, capacity)."""
        claim = prepared.claim
        counters, reason = self._reserve_counters(candidate)
        if reason is None:
            reason = self._untolerated(alternative, candidate.device)
        added: list[_Constraint] = []
        if reason is None:
            added, reason = self._constraints_add(prepared, alternative, candidate)
            if reason is not None and must:
                if counters:
                    self.counters.give_back(candidate)
                raise AllocationError(
                    f"claim {claim.key}, request {alternative.sub.name}: cannot add device "
                    f"{candidate.device_id} because a claim constraint would not be satisfied"
                )
        if reason is None:
            reason = self.capacity_problem(alternative, candidate)
            if reason is not None:
                for constraint in reversed(added):
                    constraint.remove()
        if reason is not None:
            if counters:
                self.counters.give_back(candidate)
            return reason
        return self._take(prepared, alternative, candidate, added, counters)

    def _take(
        self,
        prepared: _PreparedClaim,
        alternative: _Alternative,
        candidate: pools.Candidate,
        added: list[_Constraint],
        counters: bool,
    ) -> _Pick:
        multiple = self.multiple(candidate)
        where = f"claim {prepared.claim.key}, request {alternative.sub.name}"
        if not multiple:
            self.allocating.setdefault(candidate.device_id, []).append(where)
            self.claim_picks[(prepared.claim.key, candidate.device_id)] = alternative.sub.name
        consumed: dict[str, Fraction] | None = None
        share_id = None
        if multiple:
            requests = self._capacity_requests(alternative, candidate)
            consumed = capacity.consumption(candidate.device, requests)
            shares = self.sharing.setdefault(candidate.device_id, [])
            shares.append(consumed)
            # The scheduler makes a random UID; a dry run names the share repeatably.
            share_id = str(uuid.uuid5(_SHARE_IDS, f"{where}, {candidate.device_id}"))
        device = candidate.device
        binding = self.features.binding_conditions
        result = model.DeviceRequestAllocationResult(
            request=alternative.sub.name,
            driver=candidate.device_id.driver,
            pool=candidate.device_id.pool,
            device=candidate.device_id.device,
            admin_access=True if alternative.admin else None,
            share_id=share_id,
            consumed_capacity=consumed or {},
            tolerations=alternative.sub.tolerations,
            binding_conditions=device.binding_conditions if binding else (),
            binding_failure_conditions=device.binding_failure_conditions if binding else (),
        )
        pick = _Pick(result, candidate, added, counters, consumed)
        prepared.picked.append(pick)
        return pick

    def _give_back(self, prepared: _PreparedClaim, alternative: _Alternative) -> None:
        pick = prepared.picked.pop()
        candidate = pick.candidate
        if pick.consumed is not None:
            self.sharing[candidate.device_id].pop()
        else:
            pickers = self.allocating[candidate.device_id]
            pickers.pop()
            if not pickers:
                del self.allocating[candidate.device_id]
            del self.claim_picks[(prepared.claim.key, candidate.device_id)]
        for constraint in reversed(pick.constraints):
            constraint.remove()
        if pick.counters:
            self.counters.give_back(candidate)
        self._reject(prepared.claim, alternative, candidate, BACKTRACKED)

    def slot(
        self,
        claim_index: int,
        request_index: int,
        alternative: _Alternative,
        *,
        slot: int,
        start: int,
    ) -> bool:
        if slot == alternative.count:
            return self.request(claim_index, request_index + 1)
        prepared = self.claims[claim_index]
        claim = prepared.claim
        if alternative.all_devices is not None:
            candidate = alternative.all_devices[slot]
            self._step()
            busy = self._in_use(claim, alternative, candidate)
            if busy is not None:
                self._reject(claim, alternative, candidate, f"{busy} (All needs every device)")
                return False
            outcome = self._try(prepared, alternative, candidate, must=True)
            if isinstance(outcome, str):
                self._reject(claim, alternative, candidate, f"{outcome} (All needs every device)")
                return False
            if self.slot(claim_index, request_index, alternative, slot=slot + 1, start=0):
                return True
            self._give_back(prepared, alternative)
            return False
        for candidate in self.candidates[start:]:
            self._step()
            busy = self._in_use(claim, alternative, candidate)
            if busy is not None:
                self._reject(claim, alternative, candidate, busy)
                continue
            skips_pools = self.allocator.settings.skip_unusable_pools
            unusable = _unusable_pool(candidate.pool) if skips_pools else None
            if unusable is not None:
                self._reject(claim, alternative, candidate, unusable)
                continue
            if not self.selectable(claim, alternative, candidate):
                continue
            if candidate.pool.invalid_reason is not None:
                # Before 1.35 an invalid pool aborts the pod (v0.34.0 structured/internal/
                # incubating allocateOne); the pool is skipped since.
                raise AllocationError(
                    f"pool {candidate.pool.label} is invalid: {candidate.pool.invalid_reason}"
                )
            outcome = self._try(prepared, alternative, candidate, must=False)
            if isinstance(outcome, str):
                self._reject(claim, alternative, candidate, outcome)
                continue
            next_start = candidate.index + 1
            if self.slot(claim_index, request_index, alternative, slot=slot + 1, start=next_start):
                return True
            self._give_back(prepared, alternative)
        return False
