"""The API server's rules for a ResourceSlice that the schemas miss: driver and pool
names, pool generation and count, where the devices are (exactly one of nodeName,
nodeSelector, allNodes and, where it exists, perDeviceNodeSelection), device limits and
names, and attribute and capacity values. Also the CDI-safety lint of device names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dralet import kubenames
from dralet.validation import capacity, formats, limits, nodeselectors
from dralet.validation import taints as taints_
from dralet.validation.diagnostics import Anchor, Finding, Path
from dralet.validation.targets import ApiShape

__all__ = ["PublishedDevice", "published_devices", "slice_findings"]

_ATTRIBUTE_VALUE_FIELDS = ("int", "bool", "string", "version")
_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes")


@dataclass(frozen=True)
class PublishedDevice:
    """A device of a given slice, as selectors see it."""

    driver: str
    pool: str
    name: str
    attributes: dict[str, Any]
    capacity: dict[str, Any]


def _device_fields(device: dict[str, Any], shape: ApiShape) -> tuple[dict[str, Any] | None, Path]:
    """The mapping holding a device's attributes and capacity, and its path in the device."""
    if shape.devices_in_basic:
        basic = device.get("basic")
        return (basic if isinstance(basic, dict) else None), ("basic",)
    return device, ()


def published_devices(data: dict[str, Any], *, shape: ApiShape) -> list[PublishedDevice]:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return []
    driver = str(spec.get("driver", ""))
    pool = spec.get("pool", {})
    pool_name = str(pool.get("name", "")) if isinstance(pool, dict) else ""
    out: list[PublishedDevice] = []
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, dict):
            continue
        fields, _ = _device_fields(device, shape)
        if fields is None:
            continue
        attributes = fields.get("attributes")
        capacity = fields.get("capacity")
        out.append(
            PublishedDevice(
                driver,
                pool_name,
                str(device.get("name", "")),
                _mappings_only(attributes),
                _mappings_only(capacity),
            )
        )
    return out


def _mappings_only(values: Any) -> dict[str, Any]:
    """The entries of an attribute or capacity map whose value is an object: any other
    value is refused by the schema, and selectors see such an entry as absent."""
    if not isinstance(values, dict):
        return {}
    return {name: value for name, value in values.items() if isinstance(value, dict)}


def _node_choice(holder: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    chosen = []
    for field in fields:
        value = holder.get(field)
        if value is not None and value != "" and value is not False:
            chosen.append(field)
    return chosen


def _node_selection_message(fields: tuple[str, ...], chosen: list[str]) -> str:
    names = ", ".join(f"`{f}`" for f in fields[:-1]) + f", or `{fields[-1]}`"
    if not chosen:
        return f"exactly one of {names} is required"
    return f"exactly one of {names} is required, but multiple fields are set: {', '.join(chosen)}"


def slice_findings(data: dict[str, Any], *, shape: ApiShape) -> Iterator[Finding]:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return
    driver = spec.get("driver")
    if isinstance(driver, str):
        problem = kubenames.driver_name_problem(driver)
        if problem is not None:
            yield Finding("DRA012", ("spec", "driver"), f"driver {driver!r}: {problem}")
        else:
            yield from _cdi_vendor_findings(driver)
    pool = spec.get("pool")
    if isinstance(pool, dict):
        yield from _pool_findings(pool)
    fields = _NODE_FIELDS + (("perDeviceNodeSelection",) if shape.per_device_node_selection else ())
    chosen = _node_choice(spec, fields)
    if len(chosen) != 1:
        yield Finding("DRA015", ("spec",), _node_selection_message(fields, chosen), Anchor.KEY)
    yield from _node_fields_findings(spec, path=("spec",), pointers=shape.version == "v1")
    yield from _counter_set_findings(spec.get("sharedCounters"), shape=shape)
    if shape.counters_in_own_slices and spec.get("sharedCounters") and spec.get("devices"):
        yield Finding(
            "DRA018",
            ("spec", "sharedCounters"),
            "only one of `sharedCounters` or `devices` is allowed: counter sets go in a "
            "slice of their own in the same pool",
            Anchor.KEY,
            field="spec",  # as the server names it
        )
    per_device = "perDeviceNodeSelection" in chosen
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return
    most = shape.devices_max(
        taints_or_counters=any(
            isinstance(d, dict)
            and (_device_field(d, shape, "taints") or _device_field(d, shape, "consumesCounters"))
            for d in devices
        ),
        list_attributes=any(isinstance(d, dict) and _has_list_attribute(d, shape) for d in devices),
    )
    if len(devices) > most:
        why = (
            ""
            if most == limits.DEVICES_PER_SLICE
            else " when devices use taints, counters or list attributes"
        )
        yield Finding(
            "DRA013",
            ("spec", "devices"),
            f"{len(devices)} devices: must have at most {most} per slice{why}",
            Anchor.KEY,
        )
    seen: set[str] = set()
    for index, device in enumerate(devices):
        if isinstance(device, dict):
            yield from _device_findings(
                device,
                shape=shape,
                path=("spec", "devices", index),
                seen=seen,
                per_device=per_device,
            )


def _cdi_vendor_findings(driver: str) -> Iterator[Finding]:
    from dralet.cdi import names as cdi_names

    try:
        cdi_names.validate_vendor(driver)
    except cdi_names.CDINameError as error:
        yield Finding(
            "DRA106",
            ("spec", "driver"),
            f"driver {driver!r} is not usable as a CDI vendor: {error}",
        )


def _pool_findings(pool: dict[str, Any]) -> Iterator[Finding]:
    name = pool.get("name")
    if isinstance(name, str):
        problem = kubenames.pool_name_problem(name)
        if problem is not None:
            yield Finding("DRA012", ("spec", "pool", "name"), f"pool name {name!r}: {problem}")
    generation = pool.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
        yield Finding(
            "DRA022",
            ("spec", "pool", "generation"),
            f"generation {generation}: must be greater than or equal to zero",
        )
    count = pool.get("resourceSliceCount")
    if isinstance(count, int) and not isinstance(count, bool) and count <= 0:
        yield Finding(
            "DRA022",
            ("spec", "pool", "resourceSliceCount"),
            f"resourceSliceCount {count}: must be greater than zero",
        )


def _unset_or_meaningful_findings(holder: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    """Where the node fields are pointers (a v1 slice, and every device), ``nodeName: ""``
    and ``allNodes: false`` are set but mean nothing; the API server refuses them."""
    if holder.get("nodeName") == "":
        yield Finding(
            "DRA015",
            (*path, "nodeName"),
            "nodeName: must be either unset or set to a non-empty string",
        )
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if holder.get(flag) is False:
            yield Finding("DRA015", (*path, flag), f"{flag}: must be either unset or set to true")


def _node_fields_findings(
    holder: dict[str, Any], *, path: Path, pointers: bool = True, one_term: bool = True
) -> Iterator[Finding]:
    """``one_term``: a nodeSelector must have exactly one term (always for the slice's,
    from 1.38 for a device's)."""
    if pointers:
        yield from _unset_or_meaningful_findings(holder, path=path)
    node_name = holder.get("nodeName")
    if isinstance(node_name, str) and node_name:
        problem = kubenames.dns_subdomain_problem(node_name)
        if problem is not None:
            yield Finding("DRA012", (*path, "nodeName"), f"node name {node_name!r}: {problem}")
    selector = holder.get("nodeSelector")
    if isinstance(selector, dict):
        terms = selector.get("nodeSelectorTerms")
        count = len(terms) if isinstance(terms, list) else 0
        if count != 1 and (one_term or count == 0):
            wanted = "exactly one node selector term" if one_term else "at least one term"
            yield Finding(
                "DRA015", (*path, "nodeSelector"), f"nodeSelector: must have {wanted}", Anchor.KEY
            )
        if isinstance(terms, list):
            for index, term in enumerate(terms):
                if isinstance(term, dict):
                    yield from nodeselectors.term_findings(
                        term, path=(*path, "nodeSelector", "nodeSelectorTerms", index)
                    )


def _device_findings(
    device: dict[str, Any], *, shape: ApiShape, path: Path, seen: set[str], per_device: bool
) -> Iterator[Finding]:
    name = device.get("name")
    if isinstance(name, str):
        problem = kubenames.dns_label_problem(name)
        if problem is not None:
            yield Finding("DRA012", (*path, "name"), f"device name {name!r}: {problem}")
        if name in seen:
            yield Finding("DRA016", (*path, "name"), f"duplicate device name {name!r}")
        seen.add(name)
        from dralet.cdi import names as cdi_names

        try:
            cdi_names.validate_device_name(name)
        except cdi_names.CDINameError as error:
            yield Finding(
                "DRA106", (*path, "name"), f"device name {name!r} is not usable in CDI: {error}"
            )
    fields, inner = _device_fields(device, shape)
    if fields is None:
        # A v1beta1 device without `basic` is a device with no attributes or capacity:
        # kube-apiserver 1.37 accepts it (tests/k8s/test_validate_differential.py).
        return
    where = (*path, *inner)
    yield from _values_findings(fields, path=where, shape=shape)
    if shape.per_device_node_selection:
        chosen = _node_choice(fields, _NODE_FIELDS)
        if per_device and len(chosen) != 1:
            yield Finding(
                "DRA015", where, _node_selection_message(_NODE_FIELDS, chosen), Anchor.KEY
            )
        elif not per_device:
            for field in chosen:
                yield Finding(
                    "DRA015",
                    (*where, field),
                    f"`{field}` may only be set when `perDeviceNodeSelection` is true",
                    Anchor.KEY,
                )
        yield from _node_fields_findings(
            fields, path=where, one_term=shape.device_node_selector_one_term
        )
    yield from _consumes_counters_findings(fields.get("consumesCounters"), path=where, shape=shape)
    if shape.consumable_capacity:
        yield from capacity.request_policy_findings(
            fields.get("capacity"),
            multiple_allocations=fields.get("allowMultipleAllocations") is True,
            path=(*where, "capacity"),
        )
    taints = fields.get("taints")
    if isinstance(taints, list):
        for index, taint in enumerate(taints):
            if isinstance(taint, dict):
                yield from taints_.taint_findings(
                    taint, effects=shape.taint_effects, path=(*where, "taints", index)
                )
    if shape.binding_conditions:
        yield from taints_.binding_condition_findings(fields, path=where)
    if isinstance(taints, list) and len(taints) > shape.taints_max:
        yield Finding(
            "DRA013",
            (*where, "taints"),
            f"{len(taints)} taints: must have at most {shape.taints_max}",
            Anchor.KEY,
        )


def _values_findings(fields: dict[str, Any], *, path: Path, shape: ApiShape) -> Iterator[Finding]:
    attributes = fields.get("attributes")
    capacity = fields.get("capacity")
    attributes = attributes if isinstance(attributes, dict) else {}
    capacity = capacity if isinstance(capacity, dict) else {}
    total = len(attributes) + len(capacity)
    if total > limits.ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
        yield Finding(
            "DRA013",
            path,
            f"the total number of attributes and capacities must not exceed "
            f"{limits.ATTRIBUTES_AND_CAPACITIES_PER_DEVICE} (has {total})",
            Anchor.KEY,
        )
    lists = shape.list_attribute_values
    values = sum(_value_count(v) for v in attributes.values())
    if lists and values > limits.ATTRIBUTE_VALUES_PER_DEVICE:
        yield Finding(
            "DRA013",
            path,
            f"the total number of attribute values must not exceed "
            f"{limits.ATTRIBUTE_VALUES_PER_DEVICE} (has {values}; each item of a list counts)",
            Anchor.KEY,
        )
    for name, value in attributes.items():
        where = (*path, "attributes", name)
        yield from _qualified_name_findings(name, where, "attribute", shape=shape)
        if value is None:
            value = {}  # the API server decodes a null attribute to one with no value
        if isinstance(value, dict):
            yield from _attribute_value_findings(
                name,
                value,
                where,
                lists=lists,
                gated=shape.list_attribute_fields,
                digits=shape.version_digits_max,
            )
    for name in capacity:
        where = (*path, "capacity", name)
        yield from _qualified_name_findings(name, where, "capacity", shape=shape)


def _qualified_name_findings(
    name: str, path: Path, what: str, *, shape: ApiShape
) -> Iterator[Finding]:
    problem = formats.qualified_name_problem(name, one_slash=shape.one_slash_names)
    if problem is not None:
        yield Finding("DRA012", path, f"{what} name {name!r}: {problem}", Anchor.KEY)


def _value_count(value: Any) -> int:
    """Attribute values an attribute holds, as the per-device limit counts them."""
    if not isinstance(value, dict):
        return 1
    items = [value[k] for k in _LIST_VALUE_KEYS if isinstance(value.get(k), list)]
    return sum(len(i) for i in items) if any(items) else 1


def _attribute_value_findings(
    name: str, value: dict[str, Any], path: Path, *, lists: bool, gated: bool, digits: int | None
) -> Iterator[Finding]:
    """``lists``: list values are served; ``gated``: the release has them behind a gate;
    ``digits``: the most digits of a version's numbers."""
    kinds = (*_ATTRIBUTE_VALUE_FIELDS, *_LIST_VALUE_KEYS) if lists else _ATTRIBUTE_VALUE_FIELDS
    present = [f for f in kinds if value.get(f) is not None]
    if len(present) != 1:
        extra = "" if not present else f", but {len(present)} are: {', '.join(present)}"
        dropped = [k for k in _LIST_VALUE_KEYS if k in value] if gated and not lists else []
        hint = (
            f"; list values ({', '.join(dropped)}) need the DRAListTypeAttributes feature gate, "
            "without it the API server drops them"
            if dropped and not present
            else ""
        )
        one_of = "int, bool, string or version" + (" or a list of one" if lists else "")
        yield Finding(
            "DRA014",
            path,
            f"attribute {name!r}: exactly one value must be specified ({one_of}){extra}{hint}",
            Anchor.KEY,
        )
        return
    field = present[0]
    if field in _LIST_VALUE_KEYS:
        yield from _list_value_findings(name, field, value[field], path, digits=digits)
    elif field in ("string", "version") and isinstance(value[field], str):
        yield from _text_value_findings(name, field, value[field], (*path, field), digits=digits)


def _text_value_findings(
    name: str, field: str, text: str, path: Path, *, digits: int | None
) -> Iterator[Finding]:
    """A string or version value (alone or an item of a list): its length, and a version's
    semver format."""
    if len(text) > limits.ATTRIBUTE_VALUE_MAX_LENGTH:
        yield Finding(
            "DRA014",
            path,
            f"attribute {name!r}: {field} must be no more than "
            f"{limits.ATTRIBUTE_VALUE_MAX_LENGTH} characters",
        )
    elif field == "version":
        problem = formats.semver_problem(text, digits_max=digits)
        if problem is not None:
            yield Finding("DRA014", path, f"attribute {name!r}: {problem}")


def _list_value_findings(
    name: str, field: str, items: Any, path: Path, *, digits: int | None
) -> Iterator[Finding]:
    if not isinstance(items, list):
        return
    if not items:
        yield Finding(
            "DRA014", (*path, field), f"attribute {name!r}: {field} must not be empty if specified"
        )
    if field in ("strings", "versions"):
        for index, item in enumerate(items):
            if isinstance(item, str):
                yield from _text_value_findings(
                    name, field[:-1], item, (*path, field, index), digits=digits
                )


def _counter_names_findings(counters: Any, *, path: Path) -> Iterator[Finding]:
    if not isinstance(counters, dict):
        return
    for name in counters:
        problem = kubenames.dns_label_problem(str(name))
        if problem is not None:
            yield Finding("DRA012", (*path, name), f"counter name {name!r}: {problem}", Anchor.KEY)


def _counter_set_findings(counter_sets: Any, *, shape: ApiShape) -> Iterator[Finding]:
    """Counter set names and their counters' names are DNS labels, unique per slice; how
    many sets a slice and counters a set may hold depends on the release."""
    if not isinstance(counter_sets, list):
        return
    if len(counter_sets) > shape.counter_sets_max:
        yield Finding(
            "DRA013",
            ("spec", "sharedCounters"),
            f"{len(counter_sets)} counter sets: must have at most {shape.counter_sets_max}",
            Anchor.KEY,
        )
    per_set = shape.counters_per_set_max
    seen: set[str] = set()
    for index, counter_set in enumerate(counter_sets):
        if not isinstance(counter_set, dict):
            continue
        path: Path = ("spec", "sharedCounters", index)
        counters = counter_set.get("counters")
        if per_set is not None and isinstance(counters, dict) and len(counters) > per_set:
            yield Finding(
                "DRA013",
                (*path, "counters"),
                f"{len(counters)} counters: must have at most {per_set} per counter set",
                Anchor.KEY,
            )
        name = counter_set.get("name")
        if isinstance(name, str):
            problem = kubenames.dns_label_problem(name)
            if problem is not None:
                yield Finding("DRA012", (*path, "name"), f"counter set name {name!r}: {problem}")
            if name in seen:
                yield Finding("DRA016", (*path, "name"), f"duplicate counter set name {name!r}")
            seen.add(name)
        yield from _counters_required(counters, path=(*path, "counters"))
        yield from _counter_names_findings(counters, path=(*path, "counters"))


_LIST_VALUE_KEYS = ("strings", "ints", "bools", "versions")
"""List-type attribute values (DRAListTypeAttributes, alpha in 1.36)."""


def _device_field(device: dict[str, Any], shape: ApiShape, name: str) -> Any:
    source = device.get("basic") if shape.devices_in_basic else device
    return source.get(name) if isinstance(source, dict) else None


def _has_list_attribute(device: dict[str, Any], shape: ApiShape) -> bool:
    attributes = _device_field(device, shape, "attributes")
    if not isinstance(attributes, dict):
        return False
    return any(
        isinstance(value, dict) and any(k in value for k in _LIST_VALUE_KEYS)
        for value in attributes.values()
    )


def _counters_required(counters: Any, *, path: Path) -> Iterator[Finding]:
    """A counter set and a counter consumption each need at least one counter
    (validateCounterSet and validateDeviceCounterConsumption, k8s.io/kubernetes v1.37.2
    pkg/apis/resource/validation/validation.go)."""
    if counters == {}:
        yield Finding("DRA018", path, "at least one counter is required", Anchor.KEY)


def _consumes_counters_findings(
    consumptions: Any, *, path: Path, shape: ApiShape
) -> Iterator[Finding]:
    if not isinstance(consumptions, list):
        return
    most = shape.consumptions_per_device_max
    if most is not None and len(consumptions) > most:
        yield Finding(
            "DRA013",
            (*path, "consumesCounters"),
            f"{len(consumptions)} counter consumptions: must have at most {most} per device",
            Anchor.KEY,
        )
    seen: set[str] = set()
    for index, consumption in enumerate(consumptions):
        if not isinstance(consumption, dict):
            continue
        where: Path = (*path, "consumesCounters", index)
        name = consumption.get("counterSet")
        if isinstance(name, str):
            problem = kubenames.dns_label_problem(name)
            if problem is not None:
                yield Finding(
                    "DRA012", (*where, "counterSet"), f"counter set name {name!r}: {problem}"
                )
            if name in seen:
                yield Finding(
                    "DRA016", (*where, "counterSet"), f"duplicate counter set {name!r} consumed"
                )
            seen.add(name)
        counters = consumption.get("counters")
        yield from _counters_required(counters, path=(*where, "counters"))
        limited = most is not None  # the per-consumption limit came with the 1.35 limits
        if (
            limited
            and isinstance(counters, dict)
            and len(counters) > limits.COUNTERS_PER_CONSUMPTION
        ):
            yield Finding(
                "DRA013",
                (*where, "counters"),
                f"{len(counters)} counters: must have at most {limits.COUNTERS_PER_CONSUMPTION} "
                "per counter consumption",
                Anchor.KEY,
            )
        yield from _counter_names_findings(consumption.get("counters"), path=(*where, "counters"))
