"""The API server's rules for a ResourceClaim spec (also the ``spec.spec`` of a
ResourceClaimTemplate) that the schemas miss: request shape per API version, allocation
mode and count, names, list limits, constraints and config referring to real requests.

Defaults are applied first, as the API server does: an empty ``allocationMode`` is
ExactCount, and ExactCount with no (or zero) count asks for one device.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dralet import kubenames
from dralet.validation import expressions, formats, limits, opaque, taints
from dralet.validation.diagnostics import Anchor, Finding, Path
from dralet.validation.targets import ApiShape

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "ALLOCATION_MODES",
    "RequestView",
    "admin_access_path",
    "claim_spec_findings",
    "request_views",
]

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label (value ``"true"``) without which admission refuses a claim or
template asking for admin access (k8s.io/api v0.37.2 resource/v1 types.go
DRAAdminNamespaceLabelKey; k8s.io/kubernetes v1.37.2 pkg/registry/resource/utils.go
AuthorizedForAdmin, unchanged in v1.38.0-beta.0)."""

ALLOCATION_MODES = ("ExactCount", "All")
_EXACT_COUNT = "ExactCount"
_ALL = "All"
_LEGACY_MODES = ("WaitForFirstConsumer", "Immediate")
"""Claim-level modes of the v1alpha2 API (1.26-1.30), often copied from old guides."""
_FLAT_REQUEST_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)
"""The fields of a v1beta1 request that conversion moves into its ``exactly`` part, so none
may sit beside ``firstAvailable`` (k8s.io/kubernetes v1.37.2
pkg/apis/resource/v1beta1/conversion.go, Convert_v1beta1_DeviceRequest_To_resource_...)."""


@dataclass(frozen=True)
class RequestView:
    """One request or subrequest that asks a class for devices, wherever its shape puts it."""

    name: str
    """``request`` or ``request/subrequest``."""
    device_class_name: str
    selectors: list[tuple[int, str]]
    """(index in ``selectors``, expression) of each well-formed selector."""
    path: Path
    """Path of the object holding deviceClassName and selectors."""


def _mappings(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def _is_set(value: Any) -> bool:
    return value is not None and value != "" and value is not False


def request_views(claim_spec: Any, *, shape: ApiShape, path: Path) -> list[RequestView]:
    """Every (sub)request of a claim spec with its class and selector expressions."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    if not isinstance(devices, dict):
        return []
    views: list[RequestView] = []
    for index, request in _mappings(devices.get("requests")):
        name = str(request.get("name", ""))
        where = (*path, "devices", "requests", index)
        plain: Any = request
        plain_path = where
        if shape.requests_in_exactly:
            plain, plain_path = request.get("exactly"), (*where, "exactly")
        if isinstance(plain, dict) and isinstance(plain.get("deviceClassName"), str):
            views.append(
                RequestView(
                    name,
                    plain["deviceClassName"],
                    expressions.selector_expressions(plain.get("selectors")),
                    plain_path,
                )
            )
        for sub_index, sub in _mappings(request.get("firstAvailable")):
            if isinstance(sub.get("deviceClassName"), str):
                views.append(
                    RequestView(
                        f"{name}/{sub.get('name', '')}",
                        sub["deviceClassName"],
                        expressions.selector_expressions(sub.get("selectors")),
                        (*where, "firstAvailable", sub_index),
                    )
                )
    return views


def admin_access_path(claim_spec: Any, *, shape: ApiShape, path: Path) -> Path | None:
    """Where the first request asking for admin access sets it, as admission looks for it
    (subrequests cannot ask for it)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    if not isinstance(devices, dict):
        return None
    for index, request in _mappings(devices.get("requests")):
        where = (*path, "devices", "requests", index)
        plain: Any = request
        if shape.requests_in_exactly:
            plain, where = request.get("exactly"), (*where, "exactly")
        if isinstance(plain, dict) and plain.get("adminAccess") is True:
            return (*where, "adminAccess")
    return None


def claim_spec_findings(spec: Any, *, shape: ApiShape, path: Path) -> Iterator[Finding]:
    """Findings for a ResourceClaimSpec at ``path`` (``spec`` or ``spec.spec``)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    base = (*path, "devices")
    requests = devices.get("requests")
    known: set[str] = set()
    if isinstance(requests, list):
        if len(requests) > limits.REQUESTS_PER_CLAIM:
            yield _too_many(
                "requests", len(requests), limits.REQUESTS_PER_CLAIM, (*base, "requests")
            )
        seen: set[str] = set()
        for index, request in _mappings(requests):
            where = (*base, "requests", index)
            name = request.get("name")
            if isinstance(name, str):
                yield from _name_findings(name, path=(*where, "name"), seen=seen, what="request")
                known.add(name)
                for _, sub in _mappings(request.get("firstAvailable")):
                    if isinstance(sub.get("name"), str):
                        known.add(f"{name}/{sub['name']}")
            yield from _request_findings(request, shape=shape, path=where)
    yield from _constraint_findings(
        devices.get("constraints"), known, shape, (*base, "constraints")
    )
    configs = devices.get("config")
    for index, config in _mappings(configs):
        yield from _references(config.get("requests"), known, (*base, "config", index, "requests"))
    yield from opaque.config_findings(configs, path=(*base, "config"))


def _too_many(what: str, count: int, limit: int, path: Path) -> Finding:
    return Finding("DRA013", path, f"{count} {what}: must have at most {limit}", Anchor.KEY)


def _name_findings(name: str, *, path: Path, seen: set[str], what: str) -> Iterator[Finding]:
    problem = kubenames.dns_label_problem(name)
    if problem is not None:
        yield Finding("DRA012", path, f"{what} name {name!r}: {problem}")
    if name in seen:
        yield Finding("DRA016", path, f"duplicate {what} name {name!r}")
    seen.add(name)


def _request_findings(request: dict[str, Any], *, shape: ApiShape, path: Path) -> Iterator[Finding]:
    first_available = request.get("firstAvailable") if shape.first_available else None
    if first_available == []:
        first_available = None  # omitempty: the server decodes [] as not set
    if shape.requests_in_exactly:
        exactly = request.get("exactly")
        if exactly is None and first_available is None:
            yield Finding(
                "DRA018",
                path,
                "exactly one of `exactly` or `firstAvailable` is required",
                Anchor.KEY,
            )
        elif exactly is not None and first_available is not None:
            yield Finding(
                "DRA018",
                path,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields "
                "are set",
                Anchor.KEY,
            )
        if isinstance(exactly, dict):
            yield from _device_request_findings(exactly, shape=shape, path=(*path, "exactly"))
    elif first_available is not None:
        for field in _FLAT_REQUEST_FIELDS:
            if _is_set(request.get(field)):
                yield Finding(
                    "DRA018",
                    (*path, field),
                    f"`{field}` must not be set together with `firstAvailable`",
                    Anchor.KEY,
                )
    else:
        yield from _device_request_findings(request, shape=shape, path=path)
    if isinstance(first_available, list):
        yield from _first_available_findings(
            first_available, shape=shape, path=(*path, "firstAvailable")
        )


def _first_available_findings(
    subrequests: list[Any], *, shape: ApiShape, path: Path
) -> Iterator[Finding]:
    if len(subrequests) > limits.FIRST_AVAILABLE_PER_REQUEST:
        yield _too_many("subrequests", len(subrequests), limits.FIRST_AVAILABLE_PER_REQUEST, path)
    seen: set[str] = set()
    for index, sub in _mappings(subrequests):
        if isinstance(sub.get("name"), str):
            yield from _name_findings(
                sub["name"], path=(*path, index, "name"), seen=seen, what="subrequest"
            )
        yield from _device_request_findings(sub, shape=shape, path=(*path, index))


def _device_request_findings(
    request: dict[str, Any], *, shape: ApiShape, path: Path
) -> Iterator[Finding]:
    """Class, selectors, allocation mode and count of a request, exactly or subrequest."""
    class_name = request.get("deviceClassName")
    if not _is_set(class_name):
        yield Finding(
            "DRA018", (*path, "deviceClassName"), "`deviceClassName` is required", Anchor.KEY
        )
    elif isinstance(class_name, str):
        problem = kubenames.dns_subdomain_problem(class_name)
        if problem is not None:
            yield Finding(
                "DRA012", (*path, "deviceClassName"), f"class name {class_name!r}: {problem}"
            )
    yield from expressions.selector_findings(
        request.get("selectors"),
        path=(*path, "selectors"),
        lists=shape.list_attribute_values,
        consumable=shape.consumable_capacity,
    )
    if shape.tolerations:
        yield from taints.toleration_findings(
            request.get("tolerations"), effects=shape.taint_effects, path=(*path, "tolerations")
        )
    yield from _mode_and_count_findings(request, path=path)
    if shape.capacity_request_names:
        yield from _capacity_request_findings(request.get("capacity"), shape=shape, path=path)


def _capacity_request_findings(capacity: Any, *, shape: ApiShape, path: Path) -> Iterator[Finding]:
    """The names a request asks capacity of: short (``memory``) or qualified with the
    driver's domain (``gpu.example.com/memory``), both of which the allocator matches; and,
    from 1.38, at most 32 amounts, none negative (k8s.io/api v0.38.0-beta.0 resource/v1
    types.go CapacityRequirements.Requests: maxProperties=32, eachVal minimum=0)."""
    requests = capacity.get("requests") if isinstance(capacity, dict) else None
    if not isinstance(requests, dict):
        return
    if len(requests) > limits.CAPACITY_REQUESTS_PER_REQUEST:
        yield _too_many(
            "capacity requests",
            len(requests),
            limits.CAPACITY_REQUESTS_PER_REQUEST,
            (*path, "capacity", "requests"),
        )
    for name, amount in requests.items():
        value = formats.quantity_value(amount)
        if value is not None and value < 0:
            yield Finding(
                "DRA014",
                (*path, "capacity", "requests", name),
                f"capacity request {name!r}: {amount!r} must be zero or more",
            )
        if not isinstance(name, str):
            continue
        problem = formats.qualified_name_problem(name, one_slash=shape.one_slash_names)
        if problem is not None:
            yield Finding(
                "DRA012",
                (*path, "capacity", "requests", name),
                f"capacity name {name!r}: {problem}",
                Anchor.KEY,
            )


def _mode_and_count_findings(request: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    mode = request.get("allocationMode") or _EXACT_COUNT
    if not isinstance(mode, str):
        return
    if mode not in ALLOCATION_MODES:
        supported = ", ".join(f'"{m}"' for m in sorted(ALLOCATION_MODES))
        message = f'allocationMode "{mode}": supported values: {supported}'
        if mode in _LEGACY_MODES:
            message += (
                f'; "{mode}" was a claim-level mode of the removed v1alpha2 API: remove '
                "allocationMode (devices are allocated when the pod is scheduled)"
            )
        yield Finding("DRA010", (*path, "allocationMode"), message)
        return
    count = request.get("count")
    if not isinstance(count, int) or isinstance(count, bool):
        return
    if mode == _EXACT_COUNT and count < 0:
        yield Finding("DRA011", (*path, "count"), f"count {count}: must be greater than zero")
    if mode == _ALL and count != 0:
        yield Finding(
            "DRA011", (*path, "count"), "count must not be specified when allocationMode is 'All'"
        )


def _references(requests: Any, known: set[str], path: Path) -> Iterator[Finding]:
    if not isinstance(requests, list):
        return
    if len(requests) > limits.REQUESTS_PER_CLAIM:
        yield _too_many("requests", len(requests), limits.REQUESTS_PER_CLAIM, path)
    seen: set[str] = set()
    for index, name in enumerate(requests):
        if not isinstance(name, str):
            continue
        if name in seen:
            yield Finding("DRA016", (*path, index), f"duplicate request name {name!r}")
        seen.add(name)
        if name not in known:
            yield Finding(
                "DRA017",
                (*path, index),
                f"{name!r} must be the name of a request in the claim",
            )


def _constraint_findings(
    constraints: Any, known: set[str], shape: ApiShape, path: Path
) -> Iterator[Finding]:
    if not isinstance(constraints, list):
        return
    if len(constraints) > limits.CONSTRAINTS_PER_CLAIM:
        yield _too_many("constraints", len(constraints), limits.CONSTRAINTS_PER_CLAIM, path)
    for index, constraint in _mappings(constraints):
        where = (*path, index)
        yield from _references(constraint.get("requests"), known, (*where, "requests"))
        kinds = (
            ["matchAttribute", "distinctAttribute"]
            if shape.distinct_attribute
            else ["matchAttribute"]
        )
        present = [k for k in kinds if _is_set(constraint.get(k))]
        if not present:
            needed = " or ".join(f"`{k}`" for k in kinds)
            yield Finding("DRA018", where, f"constraint: {needed} is required", Anchor.KEY)
        # Both set is accepted: the server checks matchAttribute and ignores the other
        # (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0 pkg/apis/resource/validation/
        # validation.go validateDeviceConstraint); each name's format is checked declaratively.
        for field in present:
            value = constraint[field]
            if isinstance(value, str):
                problem = formats.qualified_name_problem(
                    value,
                    one_slash=shape.one_slash_names,
                    require_domain=True,
                    lower_case_domain=shape.declarative_constraint_names,
                )
                if problem is not None:
                    yield Finding("DRA012", (*where, field), f"{field} {value!r}: {problem}")
