"""Decoding resource.k8s.io manifests (v1beta1, v1beta2, v1) into allocator values.

Owns the differences between API versions — v1beta1 nests device fields under
``basic`` and keeps request fields flat; v1beta2 and v1 use a flat device and
``exactly`` / ``firstAvailable`` requests — and the defaults the API server applies
(allocationMode ExactCount, count 1). Input the API server would refuse raises
``ManifestError`` with the field path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from dralet import errors
from dralet.allocation import cel, extended, model, quantity

__all__ = [
    "RESOURCE_GROUP",
    "SUPPORTED_VERSIONS",
    "Inputs",
    "ManifestError",
    "decode_claim",
    "decode_class",
    "decode_node",
    "decode_objects",
    "decode_slice",
]

RESOURCE_GROUP = "resource.k8s.io"
SUPPORTED_VERSIONS = ("v1beta1", "v1beta2", "v1")
_NESTED_VERSIONS = frozenset({"v1beta1"})
_MODES: tuple[model.AllocationMode, ...] = (model.ALL, model.EXACT_COUNT)


class ManifestError(errors.InvalidRequestError):
    """A manifest cannot be used: wrong kind or version, or a field the API would refuse."""


@dataclass(frozen=True)
class Inputs:
    """Everything decoded from a set of manifests, in the order given."""

    slices: tuple[model.ResourceSlice, ...] = ()
    classes: tuple[model.DeviceClass, ...] = ()
    claims: tuple[model.ResourceClaim, ...] = ()
    nodes: tuple[model.Node, ...] = ()
    pods: tuple[model.Pod, ...] = ()
    """Pods, and one per replica of a workload's pod template, that use claims."""
    templates: frozenset[str] = frozenset()
    """Keys (``namespace/name``) of the entries of ``claims`` that are templates."""
    taint_rules: tuple[model.DeviceTaintRule, ...] = ()
    ignored: tuple[str, ...] = ()
    """``Kind/name`` of objects that play no part in allocation (Pods, ConfigMaps, ...)."""


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "<unnamed>")
    namespace = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {namespace + '/' if namespace else ''}{name}"


def _version(obj: Mapping[str, Any]) -> str:
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    if group != RESOURCE_GROUP or version not in SUPPORTED_VERSIONS:
        raise ManifestError(
            f"{_where(obj)}: apiVersion {api_version!r} is not one of "
            + ", ".join(f"{RESOURCE_GROUP}/{v}" for v in SUPPORTED_VERSIONS)
        )
    return version


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if type(value) is dict:  # the common case, without the slower abstract-class check
        return value
    if not isinstance(value, Mapping):
        raise ManifestError(f"{path}: must be an object")
    return cast("Mapping[str, Any]", value)


def _list(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ManifestError(f"{path}: must be a list")
    return value


def _name(obj: Mapping[str, Any]) -> str:
    name = _mapping(obj.get("metadata"), "metadata").get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{_where(obj)}: metadata.name: Required value")
    return name


def _requirements(items: Any, path: str) -> tuple[model.NodeSelectorRequirement, ...]:
    return tuple(
        model.NodeSelectorRequirement(
            key=str(_mapping(item, f"{path}[{i}]").get("key", "")),
            operator=str(item.get("operator", "")),
            values=tuple(str(v) for v in _list(item.get("values"), f"{path}[{i}].values")),
        )
        for i, item in enumerate(_list(items, path))
    )


def _node_selector(value: Any, path: str) -> model.NodeSelector | None:
    if value is None:
        return None
    terms = _list(_mapping(value, path).get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    return model.NodeSelector(
        terms=tuple(
            model.NodeSelectorTerm(
                match_expressions=_requirements(
                    _mapping(term, f"{path}.nodeSelectorTerms[{i}]").get("matchExpressions"),
                    f"{path}.nodeSelectorTerms[{i}].matchExpressions",
                ),
                match_fields=_requirements(
                    term.get("matchFields"), f"{path}.nodeSelectorTerms[{i}].matchFields"
                ),
            )
            for i, term in enumerate(terms)
        )
    )


def _device(raw: Any, *, driver: str, nested: bool, path: str) -> model.Device:
    fields = _mapping(raw, path)
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{path}.name: Required value")
    source: Mapping[str, Any] | None = fields
    if nested:
        source = _mapping(fields["basic"], f"{path}.basic") if "basic" in fields else None
    if source is None:
        return model.Device(name=name, attributes={}, capacity={}, view=None)
    attributes = _mapping(source.get("attributes"), f"{path}.attributes")
    for attribute_name, value in attributes.items():
        if not isinstance(value, Mapping):
            raise ManifestError(
                f"{path}.attributes[{attribute_name}]: must be an object with one value "
                "(int, bool, string or version)"
            )
    capacity = _mapping(source.get("capacity"), f"{path}.capacity")
    multiple = bool(source.get("allowMultipleAllocations"))
    view = cel.device_view(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=multiple,
    )
    values: dict[str, Fraction] = {}
    policies: dict[str, model.CapacityPolicy] = {}
    for capacity_name, entry in capacity.items():
        where = f"{path}.capacity[{capacity_name}]"
        fields_ = _mapping(entry, where)
        values[capacity_name] = _quantity(fields_.get("value"), f"{where}.value")
        if fields_.get("requestPolicy") is not None:
            policies[capacity_name] = _policy(fields_["requestPolicy"], f"{where}.requestPolicy")
    return model.Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        view=view,
        capacity_values=values,
        capacity_policies=policies,
        allow_multiple_allocations=multiple,
        taints=tuple(
            _taint(t, f"{path}.taints[{i}]")
            for i, t in enumerate(_list(source.get("taints"), f"{path}.taints"))
        ),
        consumes_counters=tuple(
            model.CounterConsumption(
                counter_set=str(_mapping(c, f"{path}.consumesCounters[{i}]").get("counterSet")),
                counters=_counters(c.get("counters"), f"{path}.consumesCounters[{i}].counters"),
            )
            for i, c in enumerate(_list(source.get("consumesCounters"), f"{path}.consumesCounters"))
        ),
        binding_conditions=_strings(source.get("bindingConditions"), f"{path}.bindingConditions"),
        binding_failure_conditions=_strings(
            source.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"
        ),
        binds_to_node=bool(source.get("bindsToNode")),
        node_name=str(source["nodeName"]) if source.get("nodeName") else None,
        node_selector=_node_selector(source.get("nodeSelector"), f"{path}.nodeSelector"),
        all_nodes=bool(source.get("allNodes")),
    )


def _taint(value: Any, path: str, *, rule: str = "") -> model.DeviceTaint:
    """A device's taint, or a DeviceTaintRule's (``rule``: the rule's name)."""
    fields_ = _mapping(value, path)
    return model.DeviceTaint(
        key=str(fields_.get("key", "")),
        effect=str(fields_.get("effect", "")),
        value=str(fields_.get("value") or ""),
        rule=rule,
    )


def _quantity(value: Any, path: str) -> Fraction:
    if value is None:
        raise ManifestError(f"{path}: Required value")
    try:
        return quantity.parse_quantity(str(value))
    except quantity.QuantityError as error:
        raise ManifestError(f"{path}: {error}") from None


def _strings(value: Any, path: str) -> tuple[str, ...]:
    return tuple(str(v) for v in _list(value, path))


def _counters(value: Any, path: str) -> dict[str, Fraction]:
    """A ``counters`` map: name -> {value: quantity}."""
    return {
        str(name): _quantity(
            _mapping(entry, f"{path}[{name}]").get("value"), f"{path}[{name}].value"
        )
        for name, entry in _mapping(value, path).items()
    }


def _policy(value: Any, path: str) -> model.CapacityPolicy:
    fields = _mapping(value, path)
    default = fields.get("default")
    valid_range = fields.get("validRange")
    bounds = _mapping(valid_range, f"{path}.validRange")
    return model.CapacityPolicy(
        default=None if default is None else _quantity(default, f"{path}.default"),
        valid_values=tuple(
            _quantity(v, f"{path}.validValues[{i}]")
            for i, v in enumerate(_list(fields.get("validValues"), f"{path}.validValues"))
        ),
        minimum=_optional_quantity(bounds.get("min"), f"{path}.validRange.min"),
        maximum=_optional_quantity(bounds.get("max"), f"{path}.validRange.max"),
        step=_optional_quantity(bounds.get("step"), f"{path}.validRange.step"),
    )


def _optional_quantity(value: Any, path: str) -> Fraction | None:
    return None if value is None else _quantity(value, path)


def _tolerations(value: Any, path: str) -> tuple[model.DeviceToleration, ...]:
    out = []
    for i, raw in enumerate(_list(value, path)):
        entry = _mapping(raw, f"{path}[{i}]")
        out.append(
            model.DeviceToleration(
                key=str(entry.get("key") or ""),
                operator=str(entry.get("operator") or "Equal"),
                value=str(entry.get("value") or ""),
                effect=str(entry.get("effect") or ""),
                raw=dict(entry),
            )
        )
    return tuple(out)


def decode_slice(obj: Mapping[str, Any]) -> model.ResourceSlice:
    """A ResourceSlice manifest as a value."""
    version = _version(obj)
    name = _name(obj)
    where = f"ResourceSlice {name}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    driver = spec.get("driver")
    if not isinstance(driver, str) or not driver:
        raise ManifestError(f"{where}: spec.driver: Required value")
    pool = _mapping(spec.get("pool"), f"{where}: spec.pool")
    if not pool.get("name"):
        raise ManifestError(f"{where}: spec.pool.name: Required value")
    generation = int(pool.get("generation", 0))
    count = int(pool.get("resourceSliceCount", 0))
    if generation < 0:
        raise ManifestError(f"{where}: spec.pool.generation: must be greater than or equal to 0")
    if count <= 0:
        raise ManifestError(f"{where}: spec.pool.resourceSliceCount: must be greater than zero")
    node_name = spec.get("nodeName") or None
    node_selector = _node_selector(spec.get("nodeSelector"), f"{where}: spec.nodeSelector")
    all_nodes = bool(spec.get("allNodes"))
    per_device = bool(spec.get("perDeviceNodeSelection"))
    chosen = sum((node_name is not None, node_selector is not None, all_nodes, per_device))
    if chosen == 0:
        raise ManifestError(
            f"{where}: spec: exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required"
        )
    if chosen > 1:
        raise ManifestError(
            f"{where}: spec: exactly one of `nodeName`, `nodeSelector`, or `allNodes` "
            "is required, but multiple fields are set"
        )
    counter_sets = {}
    for i, raw in enumerate(_list(spec.get("sharedCounters"), f"{where}: spec.sharedCounters")):
        entry = _mapping(raw, f"{where}: spec.sharedCounters[{i}]")
        counter_sets[str(entry.get("name", ""))] = _counters(
            entry.get("counters"), f"{where}: spec.sharedCounters[{i}].counters"
        )
    devices = tuple(
        _device(
            raw, driver=driver, nested=version in _NESTED_VERSIONS, path=f"{where}: devices[{i}]"
        )
        for i, raw in enumerate(_list(spec.get("devices"), f"{where}: spec.devices"))
    )
    return model.ResourceSlice(
        name=name,
        driver=driver,
        pool=str(pool["name"]),
        generation=generation,
        resource_slice_count=count,
        devices=devices,
        node_name=str(node_name) if node_name is not None else None,
        node_selector=node_selector,
        all_nodes=all_nodes,
        per_device_node_selection=per_device,
        shared_counters=counter_sets,
    )


def _selectors(raw: Any, path: str) -> tuple[str, ...]:
    expressions: list[str] = []
    for i, selector in enumerate(_list(raw, path)):
        expression = _mapping(_mapping(selector, f"{path}[{i}]").get("cel"), f"{path}[{i}].cel")
        if "expression" not in expression:
            raise ManifestError(f"{path}[{i}].cel: Required value")
        expressions.append(str(expression["expression"]))
    return tuple(expressions)


def decode_class(obj: Mapping[str, Any]) -> model.DeviceClass:
    """A DeviceClass manifest as a value."""
    _version(obj)
    name = _name(obj)
    spec = _mapping(obj.get("spec"), f"DeviceClass {name}: spec")
    config = tuple(
        _mapping(_mapping(entry, "config").get("opaque"), f"DeviceClass {name}: spec.config")
        for entry in _list(spec.get("config"), f"DeviceClass {name}: spec.config")
    )
    extended = spec.get("extendedResourceName")
    created = _mapping(obj.get("metadata"), "metadata").get("creationTimestamp")
    return model.DeviceClass(
        name=name,
        selectors=_selectors(spec.get("selectors"), f"DeviceClass {name}: spec.selectors"),
        config=tuple(c for c in config if c),
        extended_resource_name=str(extended) if extended else None,
        created=str(created or ""),
    )


def _sub_request(
    fields: Mapping[str, Any], *, name: str, path: str, admin_allowed: bool
) -> model.DeviceSubRequest:
    class_name = fields.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise ManifestError(f"{path}.deviceClassName: Required value")
    mode = fields.get("allocationMode") or model.EXACT_COUNT
    if mode not in _MODES:
        raise ManifestError(
            f'{path}.allocationMode: Unsupported value: "{mode}": supported values: '
            '"All", "ExactCount"'
        )
    count = int(fields.get("count") or 0)
    if mode == model.EXACT_COUNT:
        if count < 0:
            raise ManifestError(f"{path}.count: Invalid value: {count}: must be greater than zero")
        count = count or 1
    elif count:
        raise ManifestError(
            f"{path}.count: Invalid value: {count}: must not be specified when "
            "allocationMode is 'All'"
        )
    admin = fields.get("adminAccess")
    if admin is not None and not admin_allowed:
        raise ManifestError(f"{path}.adminAccess: Forbidden: not allowed in a firstAvailable entry")
    requested = _mapping(_mapping(fields.get("capacity"), f"{path}.capacity").get("requests"), "")
    return model.DeviceSubRequest(
        name=name,
        device_class_name=class_name,
        selectors=_selectors(fields.get("selectors"), f"{path}.selectors"),
        allocation_mode=cast("model.AllocationMode", mode),
        count=count,
        admin_access=None if admin is None else bool(admin),
        tolerations=_tolerations(fields.get("tolerations"), f"{path}.tolerations"),
        capacity_requests={
            str(k): _quantity(v, f"{path}.capacity.requests[{k}]") for k, v in requested.items()
        },
    )


def _request(raw: Any, *, version: str, path: str) -> model.DeviceRequest:
    fields = _mapping(raw, path)
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{path}.name: Required value")
    first_available = _list(fields.get("firstAvailable"), f"{path}.firstAvailable")
    if version in _NESTED_VERSIONS:
        exactly: Mapping[str, Any] | None = None if first_available else fields
    else:
        exactly = _mapping(fields["exactly"], f"{path}.exactly") if "exactly" in fields else None
        if (exactly is None) == (not first_available):
            raise ManifestError(f"{path}: exactly one of `exactly` or `firstAvailable` is required")
    if exactly is not None:
        where = path if version in _NESTED_VERSIONS else f"{path}.exactly"
        sub = _sub_request(exactly, name=name, path=where, admin_allowed=True)
        return model.DeviceRequest(name=name, alternatives=(sub,))
    alternatives = []
    for i, entry in enumerate(first_available):
        entry_fields = _mapping(entry, f"{path}.firstAvailable[{i}]")
        sub_name = entry_fields.get("name")
        if not isinstance(sub_name, str) or not sub_name:
            raise ManifestError(f"{path}.firstAvailable[{i}].name: Required value")
        alternatives.append(
            _sub_request(
                entry_fields,
                name=f"{name}/{sub_name}",
                path=f"{path}.firstAvailable[{i}]",
                admin_allowed=False,
            )
        )
    return model.DeviceRequest(name=name, alternatives=tuple(alternatives), first_available=True)


def _allocation(raw: Any, path: str) -> model.AllocationResult | None:
    if raw is None:
        return None
    fields = _mapping(raw, path)
    devices = _mapping(fields.get("devices"), f"{path}.devices")
    results = []
    for i, result in enumerate(_list(devices.get("results"), f"{path}.devices.results")):
        entry = _mapping(result, f"{path}.devices.results[{i}]")
        admin = entry.get("adminAccess")
        where = f"{path}.devices.results[{i}]"
        results.append(
            model.DeviceRequestAllocationResult(
                request=str(entry.get("request", "")),
                driver=str(entry.get("driver", "")),
                pool=str(entry.get("pool", "")),
                device=str(entry.get("device", "")),
                admin_access=None if admin is None else bool(admin),
                share_id=str(entry["shareID"]) if entry.get("shareID") else None,
                consumed_capacity={
                    str(k): _quantity(v, f"{where}.consumedCapacity[{k}]")
                    for k, v in _mapping(
                        entry.get("consumedCapacity"), f"{where}.consumedCapacity"
                    ).items()
                },
                tolerations=_tolerations(entry.get("tolerations"), f"{where}.tolerations"),
            )
        )
    return model.AllocationResult(
        results=tuple(results),
        node_selector=_node_selector(fields.get("nodeSelector"), f"{path}.nodeSelector"),
    )


def decode_claim(obj: Mapping[str, Any]) -> model.ResourceClaim:
    """A ResourceClaim (or a ResourceClaimTemplate's claim spec) as a value."""
    version = _version(obj)
    name = _name(obj)
    namespace = str(_mapping(obj.get("metadata"), "metadata").get("namespace") or "default")
    where = f"{obj.get('kind')} {namespace}/{name}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = _mapping(spec.get("spec"), f"{where}: spec.spec")
    devices = _mapping(spec.get("devices"), f"{where}: spec.devices")
    requests = tuple(
        _request(raw, version=version, path=f"{where}: spec.devices.requests[{i}]")
        for i, raw in enumerate(_list(devices.get("requests"), f"{where}: spec.devices.requests"))
    )
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: spec.devices.requests: request names must be unique")
    known = set(names) | {alt.name for r in requests for alt in r.alternatives}
    constraints = []
    for i, raw in enumerate(
        _list(devices.get("constraints"), f"{where}: spec.devices.constraints")
    ):
        entry = _mapping(raw, f"{where}: spec.devices.constraints[{i}]")
        listed = tuple(str(r) for r in _list(entry.get("requests"), "requests"))
        for request in listed:
            if request not in known:
                raise ManifestError(
                    f"{where}: spec.devices.constraints[{i}].requests: Invalid value: "
                    f'"{request}": must be the name of a request in the claim'
                )
        attribute = entry.get("matchAttribute")
        distinct = entry.get("distinctAttribute")
        constraints.append(
            model.DeviceConstraint(
                requests=listed,
                match_attribute=str(attribute) if attribute else None,
                distinct_attribute=str(distinct) if distinct else None,
            )
        )
    config = tuple(
        model.DeviceClaimConfig(
            requests=tuple(
                str(r) for r in _list(_mapping(raw, "config").get("requests"), "requests")
            ),
            opaque=_mapping(raw.get("opaque"), f"{where}: spec.devices.config[{i}].opaque"),
        )
        for i, raw in enumerate(_list(devices.get("config"), f"{where}: spec.devices.config"))
    )
    status = _mapping(obj.get("status"), f"{where}: status")
    return model.ResourceClaim(
        namespace=namespace,
        name=name,
        requests=requests,
        constraints=tuple(constraints),
        config=config,
        allocation=_allocation(status.get("allocation"), f"{where}: status.allocation"),
        api_version=f"{RESOURCE_GROUP}/{version}",
    )


def decode_taint_rule(obj: Mapping[str, Any]) -> model.DeviceTaintRule:
    """A DeviceTaintRule (v1beta2, v1): its selector's driver, pool, device and its taint."""
    _version(obj)
    name = _name(obj)
    where = f"DeviceTaintRule {name}"
    spec = _mapping(obj.get("spec"), f"{where}: spec")
    selector = spec.get("deviceSelector")
    chosen = _mapping(selector, f"{where}: spec.deviceSelector")

    def field_(key: str) -> str | None:
        value = chosen.get(key)
        return None if value is None else str(value)

    return model.DeviceTaintRule(
        name=name,
        taint=_taint(spec.get("taint"), f"{where}: spec.taint", rule=name),
        has_selector=selector is not None,
        driver=field_("driver"),
        pool=field_("pool"),
        device=field_("device"),
    )


def decode_node(obj: Mapping[str, Any]) -> model.Node:
    """A core/v1 Node as node selectors see it."""
    labels = _mapping(_mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
    return model.Node(name=_name(obj), labels={str(k): str(v) for k, v in labels.items()})


_DECODERS = {
    "ResourceSlice": "slices",
    "DeviceClass": "classes",
    "ResourceClaim": "claims",
    "ResourceClaimTemplate": "claims",
    "Node": "nodes",
    "DeviceTaintRule": "taint_rules",
}


_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
_REPLICAS_FIELD = {
    "Deployment": "replicas",
    "StatefulSet": "replicas",
    "ReplicaSet": "replicas",
    "Job": "parallelism",
}
"""Where a workload says how many pods run at once; one pod for the others (a DaemonSet
runs one per node: simulated as one pod)."""


def decode_pods(obj: Mapping[str, Any]) -> tuple[model.Pod, ...]:
    """The pods of a Pod or workload, with the claims their ``resourceClaims`` name."""
    kind = str(obj.get("kind"))
    name = _name(obj)
    namespace = str(_mapping(obj.get("metadata"), "metadata").get("namespace") or "default")
    where = f"{kind} {namespace}/{name}"
    spec: Any = obj
    for step in _POD_SPEC_PATHS[kind]:
        spec = _mapping(spec.get(step) if isinstance(spec, Mapping) else None, where)
    refs = []
    for i, raw in enumerate(_list(spec.get("resourceClaims"), f"{where}: resourceClaims")):
        entry = _mapping(raw, f"{where}: resourceClaims[{i}]")
        claim = entry.get("resourceClaimName")
        template = entry.get("resourceClaimTemplateName")
        if (claim is None) == (template is None):
            raise ManifestError(
                f"{where}: resourceClaims[{i}]: exactly one of resourceClaimName or "
                "resourceClaimTemplateName is required"
            )
        refs.append(
            model.PodClaimRef(
                name=str(entry.get("name", "")),
                claim_name=None if claim is None else str(claim),
                template_name=None if template is None else str(template),
            )
        )
    containers = extended.container_requests(spec)
    if not refs and not containers:
        return ()
    if kind == "Pod":
        return (
            model.Pod(namespace=namespace, name=name, claims=tuple(refs), containers=containers),
        )
    field = _REPLICAS_FIELD.get(kind)
    count = _mapping(obj.get("spec"), where).get(field, 1) if field else 1
    replicas = count if isinstance(count, int) and not isinstance(count, bool) else 1
    return tuple(
        model.Pod(
            namespace=namespace,
            name=f"{name}-{index}",
            claims=tuple(refs),
            source=f"{kind}/{name}",
            containers=containers,
        )
        for index in range(replicas)
    )


def _flatten(objects: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    for obj in objects:
        if obj is None:
            continue
        if not isinstance(obj, Mapping):
            raise ManifestError("every document must be a Kubernetes object (a mapping)")
        if str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
            yield from _flatten(obj["items"])
        else:
            yield obj


def decode_objects(objects: Iterable[Any]) -> Inputs:
    """Sort a stream of manifests (``List`` kinds unpacked) into allocator inputs."""
    found: dict[str, list[Any]] = {
        "slices": [],
        "classes": [],
        "claims": [],
        "nodes": [],
        "taint_rules": [],
    }
    ignored: list[str] = []
    pods: list[model.Pod] = []
    templates: set[str] = set()
    for obj in _flatten(objects):
        kind = str(obj.get("kind", ""))
        if kind in _POD_SPEC_PATHS:
            decoded = decode_pods(obj)
            if not decoded:
                ignored.append(_where(obj))
            pods.extend(decoded)
            continue
        bucket = _DECODERS.get(kind)
        if bucket is None:
            ignored.append(_where(obj))
            continue
        if bucket == "slices":
            found[bucket].append(decode_slice(obj))
        elif bucket == "classes":
            found[bucket].append(decode_class(obj))
        elif bucket == "claims":
            claim = decode_claim(obj)
            found[bucket].append(claim)
            if kind == "ResourceClaimTemplate":
                templates.add(claim.key)
        elif bucket == "taint_rules":
            found[bucket].append(decode_taint_rule(obj))
        else:
            found[bucket].append(decode_node(obj))
    return Inputs(
        slices=tuple(found["slices"]),
        classes=tuple(found["classes"]),
        claims=tuple(found["claims"]),
        nodes=tuple(found["nodes"]),
        pods=tuple(pods),
        templates=frozenset(templates),
        ignored=tuple(ignored),
        taint_rules=tuple(found["taint_rules"]),
    )
