"""Lint rules for pods and the pod templates of workloads (Deployment, StatefulSet,
DaemonSet, ReplicaSet, Job, CronJob): the pod's claim entries, containers' claim and
request references, legacy extended resources, and ResourceClaims shared between
different workloads without a stated intent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dralet import kubenames
from dralet.validation.diagnostics import Anchor, Finding, Path
from dralet.validation.documents import ManifestObject
from dralet.validation.targets import WORKLOAD_KINDS

__all__ = [
    "SHARED_CLAIM_ANNOTATION",
    "ClaimKey",
    "ClaimUse",
    "PodTemplate",
    "claim_uses",
    "pod_template",
    "pod_template_findings",
    "shared_claim_findings",
]

SHARED_CLAIM_ANNOTATION = "resource.dralet.dev/shared-claim"
"""Set to "true" on a ResourceClaim or a workload to state that sharing is intended."""
_INTENT_VALUES = ("true", "yes")
_SHARING_OWNERS = 2
"""A claim is shared once pod templates of this many owners name it."""
_KUBERNETES_DOMAIN = "kubernetes.io"
_CONTAINER_LISTS = ("initContainers", "containers")

ClaimKey = tuple[str, str]
"""(namespace, name) of a ResourceClaim or ResourceClaimTemplate."""


@dataclass(frozen=True)
class PodTemplate:
    """The pod spec of a Pod or workload, with where it sits and who owns its pods."""

    source: ManifestObject
    spec: dict[str, Any]
    path: Path
    owner: str
    """``Kind/namespace/name`` of the object whose pods these are."""


@dataclass(frozen=True)
class ClaimUse:
    """A pod template naming an existing ResourceClaim by ``resourceClaimName``."""

    template: PodTemplate
    claim: ClaimKey
    path: Path


def pod_template(obj: ManifestObject) -> PodTemplate | None:
    workload = WORKLOAD_KINDS.get(obj.kind)
    if workload is None:
        return None
    node: Any = obj.data
    for step in workload.pod_spec_path:
        node = node.get(step) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    owner = f"{obj.kind}/{obj.namespace}/{obj.name}"
    for reference in _items(obj.metadata.get("ownerReferences")):
        if isinstance(reference, dict) and reference.get("controller"):
            owner = f"{reference.get('kind')}/{obj.namespace}/{reference.get('name')}"
    return PodTemplate(obj, node, workload.pod_spec_path, owner)


def _items(value: Any) -> list[Any]:
    """A list's items; anything else (the schema refuses it) has none."""
    return value if isinstance(value, list) else []


def _containers(spec: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        if isinstance(containers, list):
            for index, container in enumerate(containers):
                if isinstance(container, dict):
                    yield (field, index), container


def _is_extended_resource(name: str) -> bool:
    domain, slash, _ = name.partition("/")
    if not slash:
        return False
    return domain != _KUBERNETES_DOMAIN and not domain.endswith(f".{_KUBERNETES_DOMAIN}")


def pod_template_findings(
    template: PodTemplate,
    *,
    claim_requests: Mapping[ClaimKey, tuple[str, list[str]]],
    template_requests: Mapping[ClaimKey, tuple[str, list[str]]],
    dra_extended_resources: set[str],
) -> Iterator[Finding]:
    """DRA018 for pod claim entries, DRA101-DRA103 for the containers.

    ``claim_requests`` and ``template_requests`` map the given ResourceClaims and
    ResourceClaimTemplates to (kind, request names); ``dra_extended_resources`` are the
    extended resource names the given DeviceClasses back with DRA.
    """
    spec, base = template.spec, template.path
    namespace = template.source.namespace
    declared: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(_items(spec.get("resourceClaims"))):
        if not isinstance(entry, dict):
            continue
        where = (*base, "resourceClaims", index)
        yield from _pod_claim_findings(entry, where, declared)
    yield from _pod_level_claims_findings(spec.get("resources"), (*base, "resources"))
    for container_path, container in _containers(spec):
        where = (*base, *container_path)
        label = str(container.get("name", container_path[1]))
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        yield from _extended_resource_findings(
            resources,
            label=label,
            path=(*where, "resources"),
            has_claims=bool(declared),
            dra_backed=dra_extended_resources,
        )
        uses = _items(resources.get("claims"))
        yield from _claim_use_findings(uses, (*where, "resources", "claims"))
        for index, use in enumerate(uses):
            if not isinstance(use, dict) or not isinstance(use.get("name"), str) or not use["name"]:
                continue
            use_path = (*where, "resources", "claims", index)
            entry = declared.get(use["name"])
            if entry is None:
                known = ", ".join(sorted(declared)) or "none"
                yield Finding(
                    "DRA102",
                    (*use_path, "name"),
                    f"container {label!r} uses claim {use['name']!r}, which is not in the pod's "
                    f"spec.resourceClaims (declared: {known})",
                )
                continue
            request = use.get("request")
            if isinstance(request, str) and request:
                yield from _request_findings(
                    request,
                    entry,
                    namespace=namespace,
                    path=(*use_path, "request"),
                    claim_requests=claim_requests,
                    template_requests=template_requests,
                )


_CLAIM_SOURCES = ("resourceClaimName", "resourceClaimTemplateName")


def _pod_claim_findings(
    entry: dict[str, Any], where: Path, declared: dict[str, dict[str, Any]]
) -> Iterator[Finding]:
    """One ``spec.resourceClaims`` entry: a unique DNS-label name, and exactly one source,
    itself a DNS subdomain; an empty string is a source that is set (k8s.io/kubernetes
    v1.37.2 and v1.38.0-beta.0 pkg/apis/core/validation/validation.go
    validatePodResourceClaim)."""
    name = entry.get("name")
    if name == "":  # a missing name is the schema's to report
        yield Finding("DRA018", (*where, "name"), "pod claim: `name` is required", Anchor.KEY)
    elif isinstance(name, str):
        if name in declared:
            yield Finding("DRA016", (*where, "name"), f"duplicate pod claim name {name!r}")
        else:
            problem = kubenames.dns_label_problem(name)
            if problem is not None:
                yield Finding("DRA012", (*where, "name"), f"pod claim name {name!r}: {problem}")
            declared[name] = entry
    label = f"pod claim {name!r}" if isinstance(name, str) and name else "pod claim"
    sources = [k for k in _CLAIM_SOURCES if entry.get(k) is not None]
    if len(sources) != 1:
        yield Finding(
            "DRA018",
            where,
            f"{label}: exactly one of `resourceClaimName` or `resourceClaimTemplateName` "
            "is required",
            Anchor.KEY,
        )
    for source in sources:
        value = entry[source]
        if isinstance(value, str):
            problem = kubenames.dns_subdomain_problem(value) if value else "must not be empty"
            if problem is not None:
                yield Finding("DRA012", (*where, source), f"{source} {value!r}: {problem}")


def _claim_use_findings(uses: list[Any], path: Path) -> Iterator[Finding]:
    """A container's ``resources.claims``: each names a claim, its request (if any) is a
    DNS label, and no claim or claim/request is named twice, nor a whole claim beside one
    of its requests (validateResourceClaimNames in the same file)."""
    names: set[str] = set()
    for index, use in enumerate(uses):
        if not isinstance(use, dict):
            continue
        name, request = use.get("name"), use.get("request")
        if name == "":  # a missing name is the schema's to report
            yield Finding("DRA018", (*path, index), "`name` is required", Anchor.KEY)
            continue
        if not isinstance(name, str):
            continue
        if name in names:
            yield Finding("DRA016", (*path, index), f"claim {name!r} is already used whole")
            continue
        key = name
        if isinstance(request, str) and request:
            problem = kubenames.dns_label_problem(request)
            if problem is not None:
                yield Finding(
                    "DRA012", (*path, index, "request"), f"request {request!r}: {problem}"
                )
            key = f"{name}/{request}"
        if key in names:
            yield Finding("DRA016", (*path, index), f"duplicate claim use {key!r}")
        elif key == name and any(k.partition("/")[0] == name for k in names if "/" in k):
            yield Finding(
                "DRA016", (*path, index), f"claim {name!r} is used whole beside one of its requests"
            )
        names.add(key)


def _pod_level_claims_findings(resources: Any, path: Path) -> Iterator[Finding]:
    """Pod-level ``spec.resources`` may not list claims (validatePodResources in the same
    file)."""
    if isinstance(resources, dict) and resources.get("claims") is not None:
        yield Finding(
            "DRA018",
            (*path, "claims"),
            "claims may not be set for resources at pod level: list them in the containers",
            Anchor.KEY,
        )


def _extended_resource_findings(
    resources: dict[str, Any], *, label: str, path: Path, has_claims: bool, dra_backed: set[str]
) -> Iterator[Finding]:
    reported: set[str] = set()
    for field in ("limits", "requests"):
        amounts = resources.get(field)
        if not isinstance(amounts, dict):
            continue
        for name in amounts:
            if name in reported or not _is_extended_resource(name) or name in dra_backed:
                continue
            reported.add(name)
            if has_claims:
                message = (
                    f"container {label!r}: extended resource {name!r} (device plugin) beside "
                    "DRA claims: a device managed by both can be handed out twice"
                )
            else:
                message = (
                    f"container {label!r}: extended resource {name!r} is a device-plugin "
                    "resource; request the device with a ResourceClaim instead"
                )
            yield Finding("DRA101", (*path, field, name), message, Anchor.KEY)


def _request_findings(
    request: str,
    entry: dict[str, Any],
    *,
    namespace: str,
    path: Path,
    claim_requests: Mapping[ClaimKey, tuple[str, list[str]]],
    template_requests: Mapping[ClaimKey, tuple[str, list[str]]],
) -> Iterator[Finding]:
    found: tuple[str, list[str]] | None = None
    if isinstance(entry.get("resourceClaimTemplateName"), str):
        found = template_requests.get((namespace, entry["resourceClaimTemplateName"]))
        target = entry["resourceClaimTemplateName"]
    elif isinstance(entry.get("resourceClaimName"), str):
        found = claim_requests.get((namespace, entry["resourceClaimName"]))
        target = entry["resourceClaimName"]
    if found is None:
        return
    kind, names = found
    if request in names:
        return
    yield Finding(
        "DRA103",
        path,
        f"request {request!r} is not a request of {kind} {target!r} "
        f"(requests: {', '.join(dict.fromkeys(names)) or 'none'})",
    )


def claim_uses(template: PodTemplate) -> Iterator[ClaimUse]:
    for index, entry in enumerate(_items(template.spec.get("resourceClaims"))):
        if isinstance(entry, dict) and isinstance(entry.get("resourceClaimName"), str):
            yield ClaimUse(
                template,
                (template.source.namespace, entry["resourceClaimName"]),
                (*template.path, "resourceClaims", index, "resourceClaimName"),
            )


def _states_intent(annotations: Any) -> bool:
    if not isinstance(annotations, dict):
        return False
    value = annotations.get(SHARED_CLAIM_ANNOTATION)
    return isinstance(value, str) and value.lower() in _INTENT_VALUES


def _template_states_intent(template: PodTemplate) -> bool:
    if _states_intent(template.source.annotations):
        return True
    pod_metadata: Any = template.source.data
    for step in template.path[:-1]:
        pod_metadata = pod_metadata.get(step) if isinstance(pod_metadata, dict) else None
    metadata = pod_metadata.get("metadata") if isinstance(pod_metadata, dict) else None
    return isinstance(metadata, dict) and _states_intent(metadata.get("annotations"))


def shared_claim_findings(
    templates: list[PodTemplate], *, claim_annotations: Mapping[ClaimKey, Any]
) -> Iterator[tuple[ClaimUse, Finding]]:
    """DRA104: one ResourceClaim named by pod templates of two or more owners."""
    by_claim: dict[ClaimKey, list[ClaimUse]] = {}
    for template in templates:
        for use in claim_uses(template):
            by_claim.setdefault(use.claim, []).append(use)
    for claim, uses in by_claim.items():
        owners = sorted({use.template.owner for use in uses})
        if len(owners) < _SHARING_OWNERS or _states_intent(claim_annotations.get(claim)):
            continue
        for use in uses:
            if _template_states_intent(use.template):
                continue
            others = ", ".join(o for o in owners if o != use.template.owner)
            yield (
                use,
                Finding(
                    "DRA104",
                    use.path,
                    f"ResourceClaim {claim[1]!r} is also used by {others}: all their pods "
                    "share the same devices; use resourceClaimTemplateName for per-pod devices, "
                    "or annotate "
                    f'{SHARED_CLAIM_ANNOTATION}: "true"',
                ),
            )
