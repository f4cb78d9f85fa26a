"""One validation run: read the inputs, check every object (served apiVersion, schema,
semantic rules, CEL), then the rules that look across objects (claim and request
references, shared claims, selectors against the given slices), and return the
diagnostics located and sorted by file, line and column.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from dralet.validation import (
    catalog,
    claims,
    classes,
    expressions,
    matching,
    metadata,
    schemas,
    slices,
    taintrules,
    taints,
    workloads,
)
from dralet.validation.diagnostics import Anchor, Diagnostic, Finding, Path, field_path
from dralet.validation.documents import ManifestObject, parse_source, read_sources
from dralet.validation.targets import (
    DRA_KINDS,
    RESOURCE_GROUP,
    WORKLOAD_KINDS,
    ApiShape,
    Target,
)

__all__ = ["Report", "validate_paths", "validate_sources"]


@dataclass(frozen=True)
class Report:
    """What a run found, and how much it read."""

    diagnostics: tuple[Diagnostic, ...]
    files: int
    objects: int


def validate_paths(paths: Sequence[str], *, target: Target, stdin: TextIO) -> Report:
    return validate_sources(read_sources(paths, stdin=stdin), target=target)


def _diagnostic(obj: ManifestObject, finding: Finding) -> Diagnostic:
    if finding.anchor is Anchor.TEXT:
        position = obj.locate_scalar_text(finding.path)
    else:
        position = obj.locate(finding.path, anchor=finding.anchor)
    known = catalog.rule(finding.rule)
    return Diagnostic(
        obj.file,
        position.line,
        position.column,
        known.id,
        known.severity,
        finding.message,
        known.fix,
        field_path(finding.path) if finding.field is None else finding.field,
    )


def validate_sources(sources: Sequence[Any], *, target: Target) -> Report:
    diagnostics: list[Diagnostic] = []
    objects: list[ManifestObject] = []
    for source in sources:
        found, problems = parse_source(source)
        objects.extend(found)
        for problem in problems:
            known = catalog.rule(problem.rule)
            diagnostics.append(
                Diagnostic(
                    problem.file,
                    problem.position.line,
                    problem.position.column,
                    known.id,
                    known.severity,
                    problem.message,
                    known.fix,
                    problem.field,
                )
            )
    run = _Run(target)
    checked = 0
    for obj in [_decoded(o, target) for o in objects]:
        findings = list(run.object_findings(obj))
        if not any(f.rule == NOT_CHECKED for f in findings):
            checked += 1
        diagnostics.extend(_diagnostic(obj, f) for f in findings)
    diagnostics.extend(_duplicate_diagnostics(objects))
    diagnostics.extend(run.cross_object_diagnostics())
    unique = sorted(set(diagnostics), key=Diagnostic.sort_key)
    return Report(tuple(unique), len(sources), checked)


NOT_CHECKED = "DRA006"
DUPLICATE_OBJECT = "DRA108"
DEPRECATED_VERSION = "DRA109"
ADMIN_ACCESS_UNLABELLED = "DRA026"
ADMIN_ACCESS_UNSEEN = "DRA110"
_CLUSTER_SCOPED = frozenset(
    {
        "DeviceClass",
        "ResourceSlice",
        "DeviceTaintRule",
        "Namespace",
        "Node",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    }
)
"""Kinds whose objects have no namespace: two with one name collide in any namespace."""


def _identity(obj: ManifestObject) -> tuple[str, str, str, str] | None:
    if not obj.name:
        return None  # generateName objects never collide
    group = obj.api_version.rpartition("/")[0]
    namespace = "" if obj.kind in _CLUSTER_SCOPED else obj.namespace
    return (group, obj.kind, namespace, obj.name)


def _duplicate_diagnostics(objects: Sequence[ManifestObject]) -> Iterator[Diagnostic]:
    """The same group/kind/namespace/name twice in one run: the later one would replace
    the earlier on apply, and cross-object rules could only see one of them."""
    first: dict[tuple[str, str, str, str], ManifestObject] = {}
    for obj in objects:
        identity = _identity(obj)
        if identity is None:
            continue
        earlier = first.setdefault(identity, obj)
        if earlier is obj:
            continue
        where = earlier.locate(("metadata", "name"))
        namespace = f"{identity[2]}/" if identity[2] else ""
        place = f"{where.line}:{where.column}"
        elsewhere = f"line {place}" if earlier.file == obj.file else f"{earlier.file}:{place}"
        yield _diagnostic(
            obj,
            Finding(
                DUPLICATE_OBJECT,
                ("metadata", "name"),
                f"{obj.kind} {namespace}{obj.name} is also defined at {elsewhere}",
            ),
        )


class _Run:
    """The objects of one run that the cross-object rules need, gathered while checking."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.templates: list[workloads.PodTemplate] = []
        self.slices: list[tuple[ManifestObject, ApiShape]] = []
        self.classes: dict[str, tuple[ManifestObject, list[tuple[int, str]]]] = {}
        self.requesters: list[tuple[ManifestObject, ApiShape, Any, tuple[str, ...]]] = []
        self.claim_requests: dict[workloads.ClaimKey, tuple[str, list[str]]] = {}
        self.template_requests: dict[workloads.ClaimKey, tuple[str, list[str]]] = {}
        self.claim_annotations: dict[workloads.ClaimKey, Any] = {}
        self.admin_access: list[tuple[ManifestObject, Path]] = []
        self.namespace_labels: dict[str, dict[str, Any]] = {}

    def object_findings(self, obj: ManifestObject) -> Iterator[Finding]:
        group = obj.api_version.rpartition("/")[0]
        if obj.kind in DRA_KINDS and group == RESOURCE_GROUP:
            yield from self._dra_findings(obj)
        elif obj.kind in WORKLOAD_KINDS and group != RESOURCE_GROUP:
            yield from self._workload_findings(obj)
        else:
            yield from self._other_findings(obj)

    def _other_findings(self, obj: ManifestObject) -> Iterator[Finding]:
        """Any other kind: its schema and metadata if the release has a schema for it
        (ConfigMaps, RBAC, ...), else a warning that it was not checked."""
        release = self.target.kubernetes_version
        validator = schemas.validator_for(release, obj.api_version, obj.kind)
        group, _, version = obj.api_version.rpartition("/")
        if validator is None and schemas.built_in_group(release, group):
            yield self._served(obj, _unserved_built_in(release, group, version, obj.kind))
            return
        if validator is None:
            yield Finding(
                NOT_CHECKED,
                ("kind",),
                f"{obj.kind} {obj.api_version}: not a kind Kubernetes "
                f"{release} serves built in; not checked",
            )
            return
        structural = schemas.schema_findings(validator, obj.data, api_version=obj.api_version)
        yield from structural
        yield from _not_repeating(
            structural, metadata.object_meta_findings(obj.kind, obj.data, name_format=False)
        )
        if group == "" and obj.kind == "Namespace":
            labels = obj.metadata.get("labels")
            self.namespace_labels[obj.name] = labels if isinstance(labels, dict) else {}
        elif group == RESOURCE_GROUP and obj.kind == "DeviceTaintRule":
            effects = ApiShape("v1", self.target.minor).taint_effects
            yield from _not_repeating(
                structural, taints.taint_rule_findings(obj.data, effects=effects)
            )
            yield from taintrules.rule_findings(obj.data)

    def _served(self, obj: ManifestObject, message: str) -> Finding:
        return Finding("DRA003", ("apiVersion",), message)

    def _dra_findings(self, obj: ManifestObject) -> Iterator[Finding]:
        shape = self.target.shape(obj.api_version)
        validator = (
            schemas.validator_for(self.target.kubernetes_version, obj.api_version, obj.kind)
            if shape is not None
            else None
        )
        if shape is None or validator is None:
            yield self._served(obj, self.target.unserved_reason(obj.api_version))
            return
        deprecated = self.target.deprecation(obj.api_version)
        if deprecated is not None:
            yield Finding(DEPRECATED_VERSION, ("apiVersion",), deprecated)
        structural = schemas.schema_findings(validator, obj.data, api_version=obj.api_version)
        yield from structural
        yield from _not_repeating(structural, self._dra_semantic_findings(obj, shape))

    def _dra_semantic_findings(self, obj: ManifestObject, shape: ApiShape) -> Iterator[Finding]:
        yield from metadata.object_meta_findings(obj.kind, obj.data)
        spec = obj.data.get("spec")
        key = (obj.namespace, obj.name)
        if obj.kind == "DeviceClass":
            yield from classes.device_class_findings(obj.data, shape=shape)
            selectors = spec.get("selectors") if isinstance(spec, dict) else None
            self.classes[obj.name] = (obj, expressions.selector_expressions(selectors))
        elif obj.kind == "ResourceSlice":
            yield from slices.slice_findings(obj.data, shape=shape)
            self.slices.append((obj, shape))
        elif obj.kind == "ResourceClaim":
            yield from claims.claim_spec_findings(spec, shape=shape, path=("spec",))
            self.requesters.append((obj, shape, spec, ("spec",)))
            self._note_admin_access(obj, spec, shape, ("spec",))
            self.claim_requests[key] = (obj.kind, _request_names(spec))
            self.claim_annotations[key] = obj.annotations
        else:
            if isinstance(spec, dict):
                yield from metadata.template_meta_findings(
                    spec.get("metadata"), path=("spec", "metadata")
                )
            inner = spec.get("spec") if isinstance(spec, dict) else None
            yield from claims.claim_spec_findings(inner, shape=shape, path=("spec", "spec"))
            self.requesters.append((obj, shape, inner, ("spec", "spec")))
            self._note_admin_access(obj, inner, shape, ("spec", "spec"))
            self.template_requests[key] = (obj.kind, _request_names(inner))

    def _note_admin_access(
        self, obj: ManifestObject, spec: Any, shape: ApiShape, path: Path
    ) -> None:
        where = claims.admin_access_path(spec, shape=shape, path=path)
        if where is not None:
            self.admin_access.append((obj, where))

    def _admin_access_diagnostics(self) -> Iterator[Diagnostic]:
        """Admission refuses admin access outside a namespace labelled for it: an error
        when the namespace is in the input without the label, else a reminder."""
        label = claims.ADMIN_ACCESS_LABEL
        for obj, where in self.admin_access:
            labels = self.namespace_labels.get(obj.namespace)
            if labels is None:
                message = (
                    f"{obj.kind} {obj.name!r} asks for admin access: namespace "
                    f'{obj.namespace!r} must carry the label {label}: "true" (not in the input)'
                )
                yield _diagnostic(
                    obj, Finding(ADMIN_ACCESS_UNSEEN, where, message, field=_admission_field(where))
                )
            elif labels.get(label) != "true":
                message = (
                    f'admin access to devices requires the label {label}: "true" on '
                    f"namespace {obj.namespace!r}"
                )
                yield _diagnostic(
                    obj,
                    Finding(ADMIN_ACCESS_UNLABELLED, where, message, field=_admission_field(where)),
                )

    def _workload_findings(self, obj: ManifestObject) -> Iterator[Finding]:
        validator = schemas.validator_for(self.target.kubernetes_version, obj.api_version, obj.kind)
        if validator is None:
            expected = WORKLOAD_KINDS[obj.kind].api_version
            yield self._served(
                obj,
                f"apiVersion {obj.api_version!r} does not serve {obj.kind} on Kubernetes "
                f"{self.target.kubernetes_version}; use {expected}",
            )
            return
        structural = schemas.schema_findings(validator, obj.data, api_version=obj.api_version)
        yield from structural
        yield from _not_repeating(structural, self._workload_semantic_findings(obj))
        template = workloads.pod_template(obj)
        if template is not None:
            self.templates.append(template)

    def _workload_semantic_findings(self, obj: ManifestObject) -> Iterator[Finding]:
        yield from metadata.object_meta_findings(obj.kind, obj.data)
        spec_path = WORKLOAD_KINDS[obj.kind].pod_spec_path
        if len(spec_path) > 1:
            template_path = spec_path[:-1]
            node: Any = obj.data
            for step in (*template_path, "metadata"):
                node = node.get(step) if isinstance(node, dict) else None
            if isinstance(node, dict):
                yield from metadata.labels_and_annotations_findings(
                    node, path=(*template_path, "metadata")
                )

    def cross_object_diagnostics(self) -> Iterator[Diagnostic]:
        dra_backed = {
            str(obj.data["spec"]["extendedResourceName"])
            for obj, _ in self.classes.values()
            if isinstance(obj.data.get("spec"), dict)
            and obj.data["spec"].get("extendedResourceName")
        }
        for template in self.templates:
            for finding in workloads.pod_template_findings(
                template,
                claim_requests=self.claim_requests,
                template_requests=self.template_requests,
                dra_extended_resources=dra_backed,
            ):
                yield _diagnostic(template.source, finding)
        for use, finding in workloads.shared_claim_findings(
            self.templates, claim_annotations=self.claim_annotations
        ):
            yield _diagnostic(use.template.source, finding)
        yield from self._selection_diagnostics()
        yield from self._admin_access_diagnostics()

    def _selection_diagnostics(self) -> Iterator[Diagnostic]:
        devices = [
            d for obj, shape in self.slices for d in slices.published_devices(obj.data, shape=shape)
        ]
        any_selector = any(e for _, e in self.classes.values()) or any(
            view.selectors
            for _, shape, spec, base in self.requesters
            for view in claims.request_views(spec, shape=shape, path=base)
        )
        if not devices or not any_selector:
            return
        catalog_ = matching.DeviceCatalog(devices)
        for name, (obj, expressions_) in self.classes.items():
            if not expressions_:
                continue
            selection = matching.Selection(
                f"DeviceClass {name!r}",
                tuple((e, ("spec", "selectors", i, "cel", "expression")) for i, e in expressions_),
                ("spec", "selectors"),
                Anchor.KEY,
            )
            for finding in matching.selection_findings(selection, catalog_):
                yield _diagnostic(obj, finding)
        for obj, shape, spec, base in self.requesters:
            for view in claims.request_views(spec, shape=shape, path=base):
                found = self.classes.get(view.device_class_name)
                class_selectors: tuple[tuple[str, Path | None], ...] = (
                    tuple((e, None) for _, e in found[1]) if found else ()
                )
                own: tuple[tuple[str, Path | None], ...] = tuple(
                    (e, (*view.path, "selectors", i, "cel", "expression"))
                    for i, e in view.selectors
                )
                if not own and (found is None or not class_selectors):
                    continue
                anchor_path = (*view.path, "selectors") if own else (*view.path, "deviceClassName")
                selection = matching.Selection(
                    f"request {view.name!r} (class {view.device_class_name!r})",
                    class_selectors + own,
                    anchor_path,
                    Anchor.KEY,
                )
                for finding in matching.selection_findings(selection, catalog_):
                    yield _diagnostic(obj, finding)


def _decoded(obj: ManifestObject, target: Target) -> ManifestObject:
    """The object as the server decodes it (``null`` list items are zero values), for the
    kinds validate has a schema of."""
    validator = schemas.validator_for(target.kubernetes_version, obj.api_version, obj.kind)
    if validator is None:
        return obj
    data = validator.decoded(obj.data)
    return obj if data is obj.data else dataclasses.replace(obj, data=data)


def _unserved_built_in(release: str, group: str, version: str, kind: str) -> str:
    """Why a built-in group's object is refused: the group has no such version of the
    kind, or no such kind (a server answers 404; no CRD can add to a built-in group)."""
    named = f"{group}/{version}" if group else version
    where = group or "the core group"
    served = schemas.served_versions(release, group, kind)
    if not served:
        close = difflib.get_close_matches(kind, schemas.kinds(release, group), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"Kubernetes {release} serves no kind {kind} in {where}{hint}"
    listed = ", ".join(f"{group}/{v}" if group else v for v in served)
    return (
        f"apiVersion {named!r} does not serve {kind} on Kubernetes {release}; "
        f"it is served as {listed}"
    )


def _admission_field(where: Path) -> str:
    """The field admission names for the request asking for admin access: always
    ``spec.devices.requests[i].adminAccess``, for a claim and a template alike, whatever the
    version's shape (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0
    pkg/registry/resource/utils.go AuthorizedForAdmin)."""
    index = where[where.index("requests") + 1]
    return f"spec.devices.requests[{index}].adminAccess"


def _not_repeating(structural: list[Finding], semantic: Iterator[Finding]) -> Iterator[Finding]:
    """Semantic findings, less those about a place the schema already reported."""
    reported = {f.path for f in structural}
    return (f for f in semantic if f.path not in reported)


def _request_names(spec: Any) -> list[str]:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    if not isinstance(requests, list):
        return []
    return [r["name"] for r in requests if isinstance(r, dict) and isinstance(r.get("name"), str)]
