"""The values the allocator works on: slices, devices, classes, claims and results.

Owns the version-neutral shape of resource.k8s.io objects (v1beta1's ``basic`` wrapper
and v1/v1beta2's ``exactly`` are gone by the time values reach here) and the
``status.allocation`` form of results. All frozen; decoding lives in ``manifests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, NamedTuple

from dralet.allocation import cel, quantity

__all__ = [
    "ALL",
    "EXACT_COUNT",
    "AllocationMode",
    "AllocationResult",
    "CapacityPolicy",
    "CounterConsumption",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceClaimConfig",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceId",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceToleration",
    "Node",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ResourceClaim",
    "ResourceSlice",
]

AllocationMode = Literal["ExactCount", "All"]
EXACT_COUNT: AllocationMode = "ExactCount"
ALL: AllocationMode = "All"


class DeviceId(NamedTuple):
    """A device's identity across the cluster: (driver, pool, device)."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` or ``matchFields`` entry of a core/v1 NodeSelector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class NodeSelectorTerm:
    """Requirements that must all hold; an empty term selects no node."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_api() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_api() for r in self.match_fields]
        return out


@dataclass(frozen=True)
class NodeSelector:
    """A core/v1 NodeSelector: the node must match at least one term."""

    terms: tuple[NodeSelectorTerm, ...]

    def to_api(self) -> dict[str, Any]:
        return {"nodeSelectorTerms": [t.to_api() for t in self.terms]}


@dataclass(frozen=True)
class Node:
    """A node as node selectors see it: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceTaint:
    """A taint on a device (``spec.devices[].taints``)."""

    key: str
    effect: str
    value: str = ""
    rule: str = ""
    """The DeviceTaintRule that put the taint on the device; empty for the slice's own."""


@dataclass(frozen=True)
class DeviceTaintRule:
    """A DeviceTaintRule (``resource.k8s.io``, GA in 1.37): its taint on every device the
    selector matches. Each of driver, pool and device narrows the match when set; an
    empty selector matches every device and a rule without one matches none
    (k8s.io/api resource/v1 types.go DeviceTaintSelector)."""

    name: str
    taint: DeviceTaint
    has_selector: bool
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def matches(self, driver: str, pool: str, device: str) -> bool:
        return (
            self.has_selector
            and self.driver in (None, driver)
            and self.pool in (None, pool)
            and self.device in (None, device)
        )


@dataclass(frozen=True)
class DeviceToleration:
    """A request's toleration of device taints; ``raw`` is the entry as written."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def tolerates(self, taint: DeviceTaint) -> bool:
        """An empty key or effect matches any; ``Exists`` ignores the value."""
        # Facts: k8s.io/dynamic-resource-allocation v0.37 resourceclaim ToleratesTaint.
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True)
class CapacityPolicy:
    """A capacity's ``requestPolicy``: what one allocation of a shared device may consume."""

    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    """Ascending, as the API server requires."""
    minimum: Fraction | None = None
    maximum: Fraction | None = None
    step: Fraction | None = None


@dataclass(frozen=True)
class CounterConsumption:
    """What a device takes from one of its pool's counter sets when allocated."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True)
class Device:
    """One device of a slice; ``view`` is None when it has no device fields (not selectable)."""

    name: str
    attributes: Mapping[str, Mapping[str, Any]]
    """Attribute name (as published, qualified or not) -> API value, e.g. {"int": 0}."""
    capacity: Mapping[str, Any]
    view: cel.DeviceView | None
    capacity_values: Mapping[str, Fraction] = field(default_factory=dict)
    """Each capacity's value, parsed."""
    capacity_policies: Mapping[str, CapacityPolicy] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    node_name: str | None = None
    """Per-device node selection (the slice's ``perDeviceNodeSelection``)."""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False


@dataclass(frozen=True)
class ResourceSlice:
    """A ResourceSlice: some devices of one pool, visible from some nodes."""

    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    devices: tuple[Device, ...]
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    shared_counters: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)
    """Counter set name -> counter name -> value (``spec.sharedCounters``)."""


@dataclass(frozen=True)
class DeviceClass:
    """A DeviceClass: selectors every device of the class must pass, and its config."""

    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    """Each entry's ``opaque`` object, as written."""
    extended_resource_name: str | None = None
    """``spec.extendedResourceName``: the extended resource pods request to get this
    class's devices (besides ``deviceclass.resource.kubernetes.io/<name>``)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339), which breaks a clash of those names."""


@dataclass(frozen=True)
class DeviceSubRequest:
    """One alternative of a request: what to allocate, from which class, how many."""

    name: str
    """The request's name for a plain request, ``request/sub`` for a firstAvailable entry."""
    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, Fraction] = field(default_factory=dict)
    """``capacity.requests``: how much of each capacity one allocated device must give."""


@dataclass(frozen=True)
class DeviceRequest:
    """A request of a claim; ``alternatives`` holds one entry unless it uses firstAvailable."""

    name: str
    alternatives: tuple[DeviceSubRequest, ...]
    first_available: bool = False


@dataclass(frozen=True)
class DeviceConstraint:
    """A claim constraint; ``requests`` empty means every request of the claim."""

    requests: tuple[str, ...]
    match_attribute: str | None
    distinct_attribute: str | None = None


@dataclass(frozen=True)
class DeviceClaimConfig:
    """A claim's ``spec.devices.config`` entry."""

    requests: tuple[str, ...]
    opaque: Mapping[str, Any]


@dataclass(frozen=True)
class DeviceRequestAllocationResult:
    """One allocated device, as in ``status.allocation.devices.results``."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    share_id: str | None = None
    """Set when the device allows multiple allocations: this allocation's share."""
    consumed_capacity: Mapping[str, Fraction] = field(default_factory=dict)
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    @property
    def device_id(self) -> DeviceId:
        return DeviceId(self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access is not None:
            out["adminAccess"] = self.admin_access
        if self.tolerations:
            out["tolerations"] = [dict(t.raw) for t in self.tolerations]
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.share_id is not None:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = {
                name: quantity.format_quantity(value)
                for name, value in sorted(self.consumed_capacity.items())
            }
        return out


@dataclass(frozen=True)
class DeviceAllocationConfiguration:
    """One ``status.allocation.devices.config`` entry."""

    source: Literal["FromClass", "FromClaim"]
    requests: tuple[str, ...]
    opaque: Mapping[str, Any]

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.requests:
            out["requests"] = list(self.requests)
        out["opaque"] = dict(self.opaque)
        return out


@dataclass(frozen=True)
class AllocationResult:
    """A claim's ``status.allocation``."""

    results: tuple[DeviceRequestAllocationResult, ...]
    config: tuple[DeviceAllocationConfiguration, ...] = ()
    node_selector: NodeSelector | None = None

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [r.to_api() for r in self.results]}
        if self.config:
            devices["config"] = [c.to_api() for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_api()
        return out


@dataclass(frozen=True)
class ResourceClaim:
    """A ResourceClaim's spec (and allocation, if it already has one)."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfig, ...] = ()
    allocation: AllocationResult | None = None
    api_version: str = "resource.k8s.io/v1"

    @property
    def key(self) -> str:
        """``namespace/name``, as the scheduler names the claim in its messages."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodClaimRef:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name or a template."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None


@dataclass(frozen=True)
class ContainerRequests:
    """A container's integer requests of extended resources (names with a domain outside
    kubernetes.io, or ``deviceclass.resource.kubernetes.io/<class>``)."""

    name: str
    index: int
    """Its index among the pod's init containers followed by its containers."""
    short_lived: bool
    """An init container that is not a sidecar (it ends before the containers start)."""
    requests: Mapping[str, int]
    names: tuple[str, ...]
    """Every resource name the container requests, sorted (a request's index among them
    names the scheduler's request)."""


@dataclass(frozen=True)
class Pod:
    """A pod (or one replica of a workload's pod template) and the claims it uses."""

    namespace: str
    name: str
    claims: tuple[PodClaimRef, ...]
    source: str = ""
    """``Kind/name`` of the workload it comes from, empty for a Pod."""
    containers: tuple[ContainerRequests, ...] = ()
    """Containers that request extended resources."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
