"""ResourceSlices as values: device rules, the slices of a pool, and the diff.

Pure functions over frozen values and JSON dicts, used by the publisher to decide what
to write and by the API stand-in to refuse what a real server refuses. Slices are built
in the canonical (v1) shape; ``dralet.kube.shapes`` rewrites them for the served
version. The limits and name rules are those of resource.k8s.io (1.32 and later).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dralet import errors, kubenames

__all__ = [
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_COUNTER_SETS_PER_SLICE",
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS",
    "InvalidDeviceError",
    "NodeOwner",
    "PoolPlan",
    "SliceWrite",
    "counter_set_problems",
    "device_problems",
    "dns_subdomain_problems",
    "driver_name_problems",
    "node_name_problems",
    "own_domain_problems",
    "plan_pool",
    "pool_name_problems",
    "qualified_name_problems",
    "slice_object",
    "slice_spec",
]

MAX_DEVICES_PER_SLICE = 128
"""Devices one ResourceSlice may hold (ResourceSliceMaxDevices)."""
MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS = 64
"""Devices a slice may hold when any of them has taints or consumes counters (Kubernetes
1.35+, ``ResourceSliceMaxDevicesWithTaintsOrConsumesCounters``; kubernetes/kubernetes
``pkg/apis/resource/validation/validation.go`` validateResourceSliceSpec)."""
MAX_COUNTER_SETS_PER_SLICE = 8
"""``ResourceSliceMaxCounterSets`` (1.35+)."""
MAX_COUNTERS_PER_SET = 32
"""``ResourceSliceMaxCountersPerCounterSet`` (1.35+)."""
MAX_COUNTER_CONSUMPTIONS_PER_DEVICE = 2
"""``ResourceSliceMaxDeviceCounterConsumptionsPerDevice`` (1.35+)."""
MAX_TAINTS_PER_DEVICE = 16
"""``DeviceTaintsMaxLength``: 4 in 1.33/1.34, 16 from 1.35."""
MAX_BINDING_CONDITIONS = 4
"""``BindingConditionsMaxSize`` and ``BindingFailureConditionsMaxSize``."""
TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute", "None"})
MAX_ATTRIBUTES_AND_CAPACITIES = 32
"""Attributes plus capacities one device may have."""
MAX_VALUE_LENGTH = kubenames.ATTRIBUTE_VALUE_MAX_LENGTH
"""Longest string or version attribute value."""
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)


class InvalidDeviceError(errors.PermanentError):
    """Devices the API server would refuse; nothing is published until they are fixed."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("devices cannot be published: " + "; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class NodeOwner:
    """The Node that owns a node-local pool's slices (its ownerReference)."""

    name: str
    uid: str | None = None
    """None when the Node could not be read: the slices are then written without owner."""


# -- rules ---------------------------------------------------------------------------


def dns_subdomain_problems(value: str, *, what: str) -> list[str]:
    problem = kubenames.dns_subdomain_problem(value) if value else "must not be empty"
    return [] if problem is None else [f"{what} {value!r} {problem}"]


def driver_name_problems(driver: str) -> list[str]:
    """A driver name: at most 63 characters, a DNS subdomain once lower-cased."""
    problem = kubenames.driver_name_problem(driver)
    return [] if problem is None else [f"driver name {driver!r}: {problem}"]


def node_name_problems(node: str) -> list[str]:
    """A node name: a DNS subdomain of at most 253 characters."""
    return dns_subdomain_problems(node, what="node name")


def pool_name_problems(pool: str) -> list[str]:
    """A pool name: at most 253 characters, '/'-separated DNS subdomains."""
    problem = kubenames.pool_name_problem(pool)
    return [] if problem is None else [f"pool name {pool!r}: {problem}"]


def qualified_name_problems(name: str, *, single_slash: bool = True) -> list[str]:
    """An attribute or capacity name: ``id`` or ``domain/id`` (id a C identifier ≤32).

    ``single_slash`` refuses ``a/b/c`` as Kubernetes 1.38 does; only the API stand-in
    playing an older release turns it off."""
    problem = kubenames.qualified_name_problem(name, single_slash=single_slash)
    return [] if problem is None else [f"name {name!r}: {problem}"]


def own_domain_problems(device: Mapping[str, Any], *, driver: str) -> list[str]:
    """Attribute and capacity names of one device (canonical JSON) that the publishing
    ``driver`` qualifies with its own name: the Go helper refuses to publish them."""
    where = f"device {device.get('name')!r}"
    problems = []
    for key_of, what in (("attributes", "attribute"), ("capacity", "capacity")):
        for key in device.get(key_of) or {}:
            problem = kubenames.own_domain_problem(key, driver=driver)
            if problem is not None:
                problems.append(f"{where}: {what} {key!r}: {problem}")
    return problems


def attribute_value_problems(name: str, value: Mapping[str, Any]) -> list[str]:
    """One attribute in JSON: exactly one of int, bool, string, version, each valid."""
    present = [k for k in ("int", "bool", "string", "version") if value.get(k) is not None]
    if len(present) != 1:
        return [f"attribute {name!r}: exactly one value must be specified (got {present})"]
    kind = present[0]
    item = value[kind]
    if kind == "int" and (
        isinstance(item, bool) or not isinstance(item, int) or not INT64_MIN <= item <= INT64_MAX
    ):
        return [f"attribute {name!r}: int {item!r} is not a 64-bit integer"]
    if kind == "bool" and not isinstance(item, bool):
        return [f"attribute {name!r}: bool {item!r} is not a boolean"]
    if kind in {"string", "version"}:
        if not isinstance(item, str):
            return [f"attribute {name!r}: {kind} {item!r} is not a string"]
        if len(item) > MAX_VALUE_LENGTH:
            return [f"attribute {name!r}: {kind} is longer than {MAX_VALUE_LENGTH} characters"]
        if kind == "version" and not _SEMVER.match(item):
            return [f"attribute {name!r}: version {item!r} is not semantic version 2.0.0"]
    return []


def quantity_problems(name: str, quantity: Any) -> list[str]:
    if not isinstance(quantity, str | int) or isinstance(quantity, bool):
        return [f"capacity {name!r}: {quantity!r} is not a quantity"]
    if not _QUANTITY.match(str(quantity)):
        return [f"capacity {name!r}: {quantity!r} is not a Kubernetes quantity"]
    return []


def device_problems(device: Mapping[str, Any], *, single_slash: bool = True) -> list[str]:
    """Everything the API server would refuse about one device in canonical JSON
    (a 1.38 server; ``single_slash=False`` for the name rule of older ones)."""
    name = str(device.get("name") or "")
    where = f"device {name!r}"
    problems: list[str] = []
    name_problem = kubenames.dns_label_problem(name) if name else "must not be empty"
    if name_problem is not None:
        problems.append(f"{where}: name {name_problem}")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        problems.append(
            f"{where}: {total} attributes and capacities; the total must not exceed "
            f"{MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
    for key, value in attributes.items():
        problems += [
            f"{where}: {p}" for p in qualified_name_problems(key, single_slash=single_slash)
        ]
        problems += [f"{where}: {p}" for p in attribute_value_problems(key, value or {})]
    for key, value in capacity.items():
        problems += [
            f"{where}: {p}" for p in qualified_name_problems(key, single_slash=single_slash)
        ]
        problems += [f"{where}: {p}" for p in quantity_problems(key, (value or {}).get("value"))]
        if (value or {}).get("requestPolicy") and not device.get("allowMultipleAllocations"):
            problems.append(
                f"{where}: capacity {key!r} has a requestPolicy, which needs "
                "allowMultipleAllocations"
            )
    problems += [f"{where}: {p}" for p in _taint_problems(device.get("taints") or [])]
    problems += [
        f"{where}: {p}" for p in _consumption_problems(device.get("consumesCounters") or [])
    ]
    for key in ("bindingConditions", "bindingFailureConditions"):
        if len(device.get(key) or []) > MAX_BINDING_CONDITIONS:
            problems.append(f"{where}: more than {MAX_BINDING_CONDITIONS} {key}")
    conditions = list(device.get("bindingConditions") or [])
    failures = list(device.get("bindingFailureConditions") or [])
    # kubernetes/kubernetes v1.37.2 pkg/apis/resource/validation validateDeviceBindingParameters
    for condition in conditions + failures:
        condition_problem = kubenames.label_key_problem(condition)
        if condition_problem is not None:
            problems.append(f"{where}: binding condition {condition!r}: {condition_problem}")
    if bool(conditions) != bool(failures):
        problems.append(f"{where}: bindingConditions and bindingFailureConditions go together")
    if len(set(conditions)) != len(conditions) or len(set(failures)) != len(failures):
        problems.append(f"{where}: binding conditions must not repeat")
    if set(conditions) & set(failures):
        problems.append(f"{where}: bindingFailureConditions must not overlap bindingConditions")
    return problems


def _taint_problems(taints: Sequence[Mapping[str, Any]]) -> list[str]:
    problems = []
    if len(taints) > MAX_TAINTS_PER_DEVICE:
        problems.append(f"{len(taints)} taints; at most {MAX_TAINTS_PER_DEVICE}")
    # k8s.io/kubernetes v1.37.2 validateDeviceTaint: a label key, an optional label value.
    for taint in taints:
        key = str(taint.get("key") or "")
        problem = kubenames.label_key_problem(key) if key else "must not be empty"
        if problem is not None:
            problems.append(f"taint key {key!r}: {problem}")
        value = str(taint.get("value") or "")
        value_problem = kubenames.label_value_problem(value) if value else None
        if value_problem is not None:
            problems.append(f"taint {key!r}: value {value!r}: {value_problem}")
        if taint.get("effect") not in TAINT_EFFECTS:
            problems.append(
                f"taint {key!r}: effect {taint.get('effect')!r} is not one of "
                f"{', '.join(sorted(TAINT_EFFECTS))}"
            )
    return problems


def _consumption_problems(consumptions: Sequence[Mapping[str, Any]]) -> list[str]:
    problems = []
    if len(consumptions) > MAX_COUNTER_CONSUMPTIONS_PER_DEVICE:
        problems.append(
            f"consumes {len(consumptions)} counter sets; at most "
            f"{MAX_COUNTER_CONSUMPTIONS_PER_DEVICE}"
        )
    for consumption in consumptions:
        problems += counter_set_problems(
            str(consumption.get("counterSet") or ""), consumption.get("counters") or {}
        )
    return problems


def counter_set_problems(name: str, counters: Mapping[str, Any]) -> list[str]:
    """A counter set (or a device's use of one): DNS-label names, at most 32 quantities."""
    problems = []
    problem = kubenames.dns_label_problem(name) if name else "must not be empty"
    if problem is not None:
        problems.append(f"counter set {name!r}: {problem}")
    if not counters:
        problems.append(f"counter set {name!r}: has no counters")
    if len(counters) > MAX_COUNTERS_PER_SET:
        problems.append(f"counter set {name!r}: more than {MAX_COUNTERS_PER_SET} counters")
    for counter, value in counters.items():
        problem = kubenames.dns_label_problem(counter)
        if problem is not None:
            problems.append(f"counter {name}/{counter}: {problem}")
        problems += quantity_problems(f"{name}/{counter}", (value or {}).get("value"))
    return problems


# -- building ------------------------------------------------------------------------


def slice_spec(
    devices: Sequence[Mapping[str, Any]],
    *,
    driver: str,
    pool: str,
    node: NodeOwner,
    generation: int,
    count: int,
    shared_counters: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The canonical ``spec`` of one slice of a node-local pool: its devices, or (from
    Kubernetes 1.35 a slice holds one or the other) its shared counter sets."""
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node.name,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    if shared_counters:
        spec["sharedCounters"] = [dict(c) for c in shared_counters]
    else:
        spec["devices"] = [dict(d) for d in devices]
    return spec


def slice_object(spec: Mapping[str, Any], *, driver: str, node: NodeOwner) -> dict[str, Any]:
    """A new canonical ResourceSlice object for ``spec`` (named by the server)."""
    metadata: dict[str, Any] = {"generateName": f"{node.name}-{driver}-"}
    if node.uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node.name,
                "uid": node.uid,
                "controller": True,
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": dict(spec),
    }


# -- diffing -------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceWrite:
    """One write the publisher must make."""

    verb: str
    """``create``, ``update`` (merge patch of ``spec``) or ``delete``."""
    name: str = ""
    """The slice's name (empty for create)."""
    resource_version: str = ""
    """Precondition for update and delete."""
    spec: Mapping[str, Any] = field(default_factory=dict)
    """The canonical spec to create or update to."""


@dataclass(frozen=True)
class PoolPlan:
    """What reconciling the pool needs: its generation and the writes."""

    generation: int
    writes: tuple[SliceWrite, ...]


def _content(spec: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    return list(spec.get("devices") or []), list(spec.get("sharedCounters") or [])


def _content_of(slice_: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    return _content(_comparable(slice_.get("spec") or {}))


def _pool_of(slice_: Mapping[str, Any]) -> Mapping[str, Any]:
    return (slice_.get("spec") or {}).get("pool") or {}


def plan_pool(
    chunks: Sequence[Sequence[Mapping[str, Any]]],
    actual: Sequence[Mapping[str, Any]],
    *,
    driver: str,
    pool: str,
    node: NodeOwner,
    last_generation: int | None,
    counter_chunks: Sequence[Sequence[Mapping[str, Any]]] = (),
) -> PoolPlan:
    """The writes that turn ``actual`` (canonical slices of this node and driver) into
    the desired pool ``chunks`` (of devices) and ``counter_chunks`` (of shared counter
    sets, each published in a slice of its own); none when they already match.

    Slices of other pools of this node and driver are deleted. The generation stays
    when the live slices still describe the desired pool (some may be missing: they are
    re-created at that generation); any other difference publishes the whole pool at a
    new generation, higher than any seen and than ``last_generation``.
    """
    ours = [s for s in actual if _pool_of(s).get("name") == pool]
    writes = [
        SliceWrite("delete", name=_name(s), resource_version=_rv(s))
        for s in actual
        if _pool_of(s).get("name") != pool
    ]
    count = len(chunks) + len(counter_chunks)
    generations = [int(_pool_of(s).get("generation") or 0) for s in ours]
    newest = max([*generations, -1 if last_generation is None else last_generation])
    current = [s for s in ours if int(_pool_of(s).get("generation") or 0) == newest]

    def specs_at(generation: int) -> list[dict[str, Any]]:
        def spec(devices: Sequence[Any], counters: Sequence[Any] = ()) -> dict[str, Any]:
            return slice_spec(
                devices,
                shared_counters=counters,
                driver=driver,
                pool=pool,
                node=node,
                generation=generation,
                count=count,
            )

        return [spec((), c) for c in counter_chunks] + [spec(c) for c in chunks]

    wanted = specs_at(newest)
    unmatched_wanted = list(wanted)
    unmatched_actual: list[Mapping[str, Any]] = []
    for existing in current:
        spec = _comparable(existing.get("spec") or {})
        if spec in unmatched_wanted:
            unmatched_wanted.remove(spec)
        else:
            unmatched_actual.append(existing)
    stale = [s for s in ours if s not in current]
    if newest >= 0 and not unmatched_actual and not stale:
        # The live slices describe the pool: re-create any that went missing.
        writes += [SliceWrite("create", spec=s) for s in unmatched_wanted]
        return PoolPlan(newest, tuple(writes))
    generation = newest + 1
    specs = specs_at(generation)
    # Reuse existing slices (those holding the same content first) before creating.
    reusable = list(ours)
    for spec in specs:
        match = next((s for s in reusable if _content_of(s) == _content(spec)), None)
        if match is None and reusable:
            match = reusable[0]
        if match is None:
            writes.append(SliceWrite("create", spec=spec))
            continue
        reusable.remove(match)
        writes.append(
            SliceWrite("update", name=_name(match), resource_version=_rv(match), spec=spec)
        )
    writes += [SliceWrite("delete", name=_name(s), resource_version=_rv(s)) for s in reusable]
    return PoolPlan(generation, tuple(writes))


def _comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A live slice's spec with only the fields dralet writes, for comparison."""
    pool = spec.get("pool") or {}
    comparable: dict[str, Any] = {
        "driver": spec.get("driver"),
        "nodeName": spec.get("nodeName"),
        "pool": {
            "name": pool.get("name"),
            "generation": pool.get("generation"),
            "resourceSliceCount": pool.get("resourceSliceCount"),
        },
    }
    if spec.get("sharedCounters"):
        comparable["sharedCounters"] = list(spec["sharedCounters"])
    else:
        comparable["devices"] = [_without_server_fields(d) for d in spec.get("devices") or []]
    return comparable


def _without_server_fields(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """A live device without what the server adds on its own (a taint's ``timeAdded``)."""
    taints = device.get("taints")
    if not taints:
        return device
    plain = dict(device)
    plain["taints"] = [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]
    return plain


def _name(slice_: Mapping[str, Any]) -> str:
    return str((slice_.get("metadata") or {}).get("name") or "")


def _rv(slice_: Mapping[str, Any]) -> str:
    return str((slice_.get("metadata") or {}).get("resourceVersion") or "")
