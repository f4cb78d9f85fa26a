"""The structured allocator: which devices of one node satisfy a set of claims.

Owns the scheduler's search as specified for Kubernetes 1.32 and later: per claim and
request, device class selectors then request selectors (CEL, each expression compiled
once), ExactCount and All, firstAvailable alternatives in order, ``matchAttribute``
constraints across requests, adminAccess, devices already allocated to other claims
left alone, depth-first search with backtracking where the first full solution wins.

Three outcomes, kept apart as the scheduler does: a fit (one ``AllocationResult`` per
claim), no fit (the scheduler's Unschedulable "cannot allocate all claims"), and
``AllocationError`` for input the scheduler refuses outright (its framework.Error:
a CEL error, a missing class, All over an incomplete pool, too many devices).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dralet import errors
from dralet.allocation import cel, model, pools

__all__ = [
    "AllocationError",
    "Allocator",
    "AllocatorSettings",
    "NodeAllocation",
    "Rejection",
]

BACKTRACKED = "picked, then given back: the requests after it could not be satisfied"
NOT_SELECTABLE = "no device fields (v1beta1 device without `basic`): not selectable"


class AllocationError(errors.PermanentError):
    """Input the scheduler refuses outright: scheduling the pod is aborted, not retried here."""


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

    @property
    def fits(self) -> bool:
        return self.allocations is not None


def _attribute(candidate: pools.Candidate, qualified: str) -> tuple[str, Any] | None:
    """The (type, value) of a fully qualified attribute on a device, if it has it."""
    attributes = candidate.device.attributes
    raw = attributes.get(qualified)
    if raw is None:
        domain, _, identifier = qualified.partition("/")
        if domain == candidate.device_id.driver:
            raw = attributes.get(identifier)
    if raw is None:
        return None
    for kind in ("string", "int", "bool", "version"):
        if raw.get(kind) is not None:
            return kind, raw[kind]
    return None


@dataclass
class _MatchAttribute:
    """A matchAttribute constraint during one search: the first device fixes the value."""

    attribute: str
    requests: frozenset[str] | None
    value: tuple[str, Any] | None = None
    devices: int = 0

    def applies(self, alternative: _Alternative) -> bool:
        return (
            self.requests is None
            or alternative.sub.name in self.requests
            or alternative.request.name in self.requests
        )

    def add(self, candidate: pools.Candidate) -> str | None:
        found = _attribute(candidate, self.attribute)
        if found is None:
            return f"constraint matchAttribute {self.attribute}: device has no such attribute"
        if self.value is not None and found != self.value:
            return (
                f"constraint matchAttribute {self.attribute}: {found[0]} {found[1]!r} differs "
                f"from {self.value[0]} {self.value[1]!r} of the devices already picked"
            )
        self.value = found
        self.devices += 1
        return None

    def remove(self) -> None:
        self.devices -= 1
        if self.devices == 0:
            self.value = None


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
class _PreparedClaim:
    claim: model.ResourceClaim
    requests: list[list[_Alternative]]
    constraints: list[_MatchAttribute]
    picked: list[tuple[model.DeviceRequestAllocationResult, pools.Candidate]] = field(
        default_factory=list
    )
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
        allocated: Mapping[model.DeviceId, str],
        explain: bool = False,
    ) -> NodeAllocation:
        """Devices for every claim from this node's pools, or None if they do not all fit.

        ``allocated`` maps devices already in use (by other claims' ``status.allocation``,
        adminAccess results excluded) to the claim holding them. Raises
        ``AllocationError`` where the scheduler would give up on the pod.
        """
        search = _Search(self, node_pools=node_pools, allocated=allocated, explain=explain)
        prepared = [self._prepare(claim, node_pools, search) for claim in claims]
        search.claims = prepared
        fits = search.claim(0)
        allocations = tuple(self._result(p) for p in prepared) if fits else None
        return NodeAllocation(
            node=node_pools.node.name,
            allocations=allocations,
            rejections=tuple(search.rejections.values()),
            notes=node_pools.notes,
        )

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
        constraints = []
        for index, constraint in enumerate(claim.constraints):
            if constraint.match_attribute is None:
                raise AllocationError(
                    f"claim {claim.key}: constraint #{index}: unsupported constraint type"
                )
            constraints.append(
                _MatchAttribute(
                    attribute=constraint.match_attribute,
                    requests=frozenset(constraint.requests) if constraint.requests else None,
                )
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
            for pool in node_pools.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"{where}: asks for all devices, but resource pool {pool.label} is "
                        "currently being updated"
                    )
                if pool.invalid_reason is not None:
                    raise AllocationError(
                        f"{where}: asks for all devices, but resource pool {pool.label} is "
                        "currently invalid"
                    )
            matching = tuple(
                c for c in node_pools.candidates if search.selectable(claim, alternative, c)
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

    def _result(self, prepared: _PreparedClaim) -> model.AllocationResult:
        candidates = [c for _, c in prepared.picked]
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
            results=tuple(r for r, _ in prepared.picked),
            config=tuple(config),
            node_selector=_node_selector(candidates),
        )


def _node_selector(candidates: Sequence[pools.Candidate]) -> model.NodeSelector | None:
    """Where the claim's devices are usable: one node, the merged selectors, or anywhere."""
    for candidate in candidates:
        if candidate.slice.node_name is not None:
            requirement = model.NodeSelectorRequirement(
                key="metadata.name", operator="In", values=(candidate.slice.node_name,)
            )
            return model.NodeSelector(terms=(model.NodeSelectorTerm(match_fields=(requirement,)),))
    expressions: list[model.NodeSelectorRequirement] = []
    fields: list[model.NodeSelectorRequirement] = []
    for candidate in candidates:
        selector = candidate.slice.node_selector
        if selector is None:
            continue
        for term in selector.terms:
            expressions.extend(r for r in term.match_expressions if r not in expressions)
            fields.extend(r for r in term.match_fields if r not in fields)
    if not expressions and not fields:
        return None
    term = model.NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields))
    return model.NodeSelector(terms=(term,))


class _Search:
    """The state of one depth-first search: devices being allocated, constraint values."""

    def __init__(
        self,
        allocator: Allocator,
        *,
        node_pools: pools.NodePools,
        allocated: Mapping[model.DeviceId, str],
        explain: bool,
    ) -> None:
        self.allocator = allocator
        self.candidates = node_pools.candidates
        self.allocated = allocated
        self.explain = explain
        self.claims: list[_PreparedClaim] = []
        self.allocating: dict[model.DeviceId, str] = {}
        self.rejections: dict[tuple[str, str, model.DeviceId], Rejection] = {}
        self.claim_picks: dict[tuple[str, model.DeviceId], str] = {}
        """(claim, device) -> request: one device serves at most one request of a claim,
        admin access or not."""
        self.steps = 0

    def selectable(
        self, claim: model.ResourceClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> bool:
        ok = self.allocator.check_selectors(claim, alternative, candidate)
        if not ok and self.explain:
            self._reject(
                claim,
                alternative,
                candidate,
                self.allocator.selector_reason(claim, alternative, candidate),
            )
        return ok

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
        picked_by = self.claim_picks.get((claim.key, candidate.device_id))
        if picked_by is not None:
            return f"in use: already picked for request {picked_by} of this claim"
        if alternative.admin:
            return None
        holder = self.allocated.get(candidate.device_id)
        if holder is not None:
            return f"in use: allocated to claim {holder}"
        picker = self.allocating.get(candidate.device_id)
        if picker is not None:
            return f"in use: already picked for {picker} in this pass"
        return None

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
    ) -> tuple[list[_MatchAttribute], str | None]:
        added: list[_MatchAttribute] = []
        for constraint in prepared.constraints:
            if not constraint.applies(alternative):
                continue
            reason = constraint.add(candidate)
            if reason is not None:
                for done in added:
                    done.remove()
                return [], reason
            added.append(constraint)
        return added, None

    def _take(
        self, prepared: _PreparedClaim, alternative: _Alternative, candidate: pools.Candidate
    ) -> None:
        if not alternative.admin:
            self.allocating[candidate.device_id] = (
                f"claim {prepared.claim.key}, request {alternative.sub.name}"
            )
        self.claim_picks[(prepared.claim.key, candidate.device_id)] = alternative.sub.name
        result = model.DeviceRequestAllocationResult(
            request=alternative.sub.name,
            driver=candidate.device_id.driver,
            pool=candidate.device_id.pool,
            device=candidate.device_id.device,
            admin_access=True if alternative.admin else None,
        )
        prepared.picked.append((result, candidate))

    def _give_back(
        self,
        prepared: _PreparedClaim,
        alternative: _Alternative,
        candidate: pools.Candidate,
        added: list[_MatchAttribute],
    ) -> None:
        prepared.picked.pop()
        if not alternative.admin:
            del self.allocating[candidate.device_id]
        del self.claim_picks[(prepared.claim.key, candidate.device_id)]
        for constraint in added:
            constraint.remove()
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
            added, reason = self._constraints_add(prepared, alternative, candidate)
            if reason is not None:
                raise AllocationError(
                    f"claim {claim.key}, request {alternative.sub.name}: cannot add device "
                    f"{candidate.device_id} because a claim constraint would not be satisfied"
                )
            self._take(prepared, alternative, candidate)
            if self.slot(claim_index, request_index, alternative, slot=slot + 1, start=0):
                return True
            self._give_back(prepared, alternative, candidate, added)
            return False
        for candidate in self.candidates[start:]:
            self._step()
            busy = self._in_use(claim, alternative, candidate)
            if busy is not None:
                self._reject(claim, alternative, candidate, busy)
                continue
            if not self.selectable(claim, alternative, candidate):
                continue
            if candidate.pool.invalid_reason is not None:
                raise AllocationError(
                    f"pool {candidate.pool.label} is invalid: {candidate.pool.invalid_reason}"
                )
            added, reason = self._constraints_add(prepared, alternative, candidate)
            if reason is not None:
                self._reject(claim, alternative, candidate, reason)
                continue
            self._take(prepared, alternative, candidate)
            next_start = candidate.index + 1
            if self.slot(claim_index, request_index, alternative, slot=slot + 1, start=next_start):
                return True
            self._give_back(prepared, alternative, candidate, added)
        return False
