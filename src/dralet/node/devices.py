"""The devices a backend publishes, as values: attributes, capacity, taints, counters.

Everything here is what one ``Device`` of a ResourceSlice can say (resource.k8s.io/v1
``Device``, kubernetes/api ``resource/v1/types.go``). Fields that newer Kubernetes
releases added are optional; the publisher writes each only to a cluster that serves it
(``dralet.kube.features``) and says so in one log line when it must leave one out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from dralet.kube import slices

__all__ = [
    "AttributeValue",
    "Capacity",
    "CounterConsumption",
    "CounterSet",
    "CounterSetSource",
    "Device",
    "DeviceTaint",
    "QuantityRange",
    "RequestPolicy",
    "TaintEffect",
    "Version",
    "attributes_to_json",
    "counter_set_to_json",
    "device_to_json",
    "taint_to_json",
]


@dataclass(frozen=True)
class Version:
    """A semantic-version attribute value (``version`` in the ResourceSlice API)."""

    value: str


AttributeValue = bool | int | str | Version

TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
"""``None`` (no effect, informational) is accepted from Kubernetes 1.35
(KEP-5055 revision 2; kubernetes/api ``resource/v1/types.go`` DeviceTaintEffectNone)."""


@dataclass(frozen=True)
class DeviceTaint:
    """A taint on a device: the scheduler allocates it only to claims that tolerate it."""

    key: str
    """A qualified name, e.g. ``gpu.example.com/unhealthy``."""
    effect: TaintEffect
    value: str = ""


@dataclass(frozen=True)
class QuantityRange:
    """The amounts a request may consume of a shared capacity: ``min`` up to ``max`` in
    steps of ``step`` (``CapacityRequestPolicyRange``)."""

    min: str
    max: str | None = None
    step: str | None = None


@dataclass(frozen=True)
class RequestPolicy:
    """How much of a capacity one allocation of a shared device may take
    (``CapacityRequestPolicy``): ``default`` when a request names no amount, and either
    a list of ``valid_values`` (ascending, at most 10, containing the default) or a
    ``valid_range``. Only for devices with ``allow_multiple_allocations``."""

    default: str
    valid_values: tuple[str, ...] = ()
    valid_range: QuantityRange | None = None


@dataclass(frozen=True)
class Capacity:
    """A capacity with a request policy (consumable capacity, Kubernetes 1.34 alpha,
    1.36 beta). A plain quantity string is enough where no policy is needed."""

    value: str
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True)
class CounterSet:
    """Counters that partitions of one physical device share (partitionable devices):
    published once per pool in a slice of its own, e.g. a GPU's memory slices."""

    name: str
    """A DNS label, unique in the pool."""
    counters: Mapping[str, str]
    """Counter name (DNS label) → the quantity available."""


@dataclass(frozen=True)
class CounterConsumption:
    """What a device takes from one counter set when it is allocated."""

    counter_set: str
    counters: Mapping[str, str]


@dataclass(frozen=True)
class Device:
    """One device as published in a ResourceSlice.

    ``attributes`` and ``capacity`` keys are either plain (``model``) or qualified with
    a domain (``gpu.example.com/model``); capacity values are Kubernetes quantities, or
    ``Capacity`` where a request policy applies.
    """

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str | Capacity] = field(default_factory=dict)
    taints: tuple[DeviceTaint, ...] = ()
    """At most 16 (Kubernetes 1.35+; 4 before)."""
    consumes_counters: tuple[CounterConsumption, ...] = ()
    """At most 2 counter sets per device (Kubernetes 1.35+)."""
    partition: bool = False
    """The device is one way of cutting hardware it shares with other devices through
    ``consumes_counters``. Where the cluster does not serve partitionable devices, the
    scheduler cannot keep such devices apart, so a partition is not published there
    (devices that are not partitions are, without their counters)."""
    allow_multiple_allocations: bool = False
    """Several claims may be allocated this device at once, each consuming part of its
    capacity (consumable capacity); the kubelet then sends a ``share_id`` per claim."""
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    """Conditions a controller must set on the claim's device status before the pod is
    bound (binding conditions, Kubernetes 1.34 alpha, 1.36 beta); at most 4."""
    binding_failure_conditions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse at once what the API server would refuse at publish time."""
        for key, value in self.attributes.items():
            if not isinstance(value, bool | int | str | Version):
                # One error type (ValueError) for every bad field, whatever the rule.
                raise ValueError(  # noqa: TRY004
                    f"Device {self.name!r}: attribute {key!r} is a {type(value).__name__}; "
                    "attribute values are bool, int, str or dralet.Version"
                )
        problems = slices.device_problems(device_to_json(self))
        if problems:
            raise ValueError("; ".join(problems))


def attributes_to_json(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """Attribute values in API form (``{"int": 3}``, ``{"version": "1.2.3"}``), by name."""
    out: dict[str, Any] = {}
    for key, value in sorted(attributes.items()):
        if isinstance(value, Version):
            out[key] = {"version": value.value}
        elif isinstance(value, bool):
            out[key] = {"bool": value}
        elif isinstance(value, int):
            out[key] = {"int": value}
        else:
            out[key] = {"string": value}
    return out


def device_to_json(device: Device) -> dict[str, Any]:
    """A backend ``Device`` as a canonical (v1-shaped) ResourceSlice device."""
    attributes = attributes_to_json(device.attributes)
    out: dict[str, Any] = {"name": device.name}
    if attributes:
        out["attributes"] = attributes
    if device.capacity:
        out["capacity"] = {k: _capacity_to_json(v) for k, v in sorted(device.capacity.items())}
    if device.taints:
        out["taints"] = [taint_to_json(t) for t in device.taints]
    if device.consumes_counters:
        out["consumesCounters"] = [
            {"counterSet": c.counter_set, "counters": _counters_to_json(c.counters)}
            for c in device.consumes_counters
        ]
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.binds_to_node:
        out["bindsToNode"] = True
    if device.binding_conditions:
        out["bindingConditions"] = list(device.binding_conditions)
    if device.binding_failure_conditions:
        out["bindingFailureConditions"] = list(device.binding_failure_conditions)
    return out


def _capacity_to_json(capacity: str | Capacity) -> dict[str, Any]:
    if not isinstance(capacity, Capacity):
        return {"value": str(capacity)}
    out: dict[str, Any] = {"value": capacity.value}
    policy = capacity.request_policy
    if policy is not None:
        json_policy: dict[str, Any] = {"default": policy.default}
        if policy.valid_values:
            json_policy["validValues"] = list(policy.valid_values)
        if policy.valid_range is not None:
            bounds = {"min": policy.valid_range.min}
            if policy.valid_range.max is not None:
                bounds["max"] = policy.valid_range.max
            if policy.valid_range.step is not None:
                bounds["step"] = policy.valid_range.step
            json_policy["validRange"] = bounds
        out["requestPolicy"] = json_policy
    return out


def taint_to_json(taint: DeviceTaint) -> dict[str, Any]:
    """A ``DeviceTaint`` as canonical ResourceSlice JSON."""
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def _counters_to_json(counters: Mapping[str, str]) -> dict[str, Any]:
    return {name: {"value": str(value)} for name, value in sorted(counters.items())}


def counter_set_to_json(counter_set: CounterSet) -> dict[str, Any]:
    """A ``CounterSet`` as canonical ResourceSlice ``sharedCounters`` JSON."""
    return {"name": counter_set.name, "counters": _counters_to_json(counter_set.counters)}


@runtime_checkable
class CounterSetSource(Protocol):
    """Implemented by a backend whose devices share counters (partitionable devices):
    the publisher publishes these sets in slices of their own, next to the devices."""

    async def counter_sets(self) -> Sequence[CounterSet]:
        """Every counter set of this node's pool, in a stable order."""
        ...
