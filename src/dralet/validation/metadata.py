"""The API server's ObjectMeta rules: a name or generateName, the name format each kind
requires, a namespace that is a DNS label, label keys and values, annotation keys and
their total size (and the same for a workload's pod template labels and annotations).

Name formats per kind, from the kinds' validation in kubernetes/kubernetes: the DRA kinds,
Pod, Deployment, ReplicaSet, DaemonSet, Job and CronJob names are DNS subdomains; a
StatefulSet name is a DNS label (pkg/apis/apps/validation, ValidateStatefulSetName); a
CronJob name is at most 52 characters (pkg/apis/batch/validation: 63 minus the 11 of the
Job name suffix it adds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dralet import kubenames
from dralet.validation.diagnostics import Anchor, Finding, Path

__all__ = [
    "RULE",
    "labels_and_annotations_findings",
    "object_meta_findings",
    "template_meta_findings",
]

RULE = "DRA023"
"""Missing names, labels and annotations; name formats are DRA012 like every other name."""
NAME_RULE = "DRA012"
CRONJOB_NAME_MAX_LENGTH = 52

_NameRule = Callable[..., str | None]
_LABEL_NAMED_KINDS = frozenset({"StatefulSet"})


def _name_rule(kind: str) -> _NameRule:
    if kind in _LABEL_NAMED_KINDS:
        return kubenames.dns_label_name_problem
    return kubenames.dns_subdomain_name_problem


def object_meta_findings(
    kind: str, data: dict[str, Any], *, name_format: bool = True
) -> Iterator[Finding]:
    """``name_format=False`` for kinds whose name rule dralet does not hold (RBAC names,
    for one, are path segments)."""
    metadata = data.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return  # the schema reports the type
    base: Path = ("metadata",)
    name = metadata.get("name")
    generate_name = metadata.get("generateName")
    rule = _name_rule(kind)
    if not name and not generate_name:
        yield Finding(
            RULE, (*base, "name"), "metadata.name: name or generateName is required", Anchor.KEY
        )
    if isinstance(name, str) and name and name_format:
        problem = rule(name)
        if problem is not None:
            yield Finding(NAME_RULE, (*base, "name"), f"{kind} name {name!r}: {problem}")
        elif kind == "CronJob" and len(name) > CRONJOB_NAME_MAX_LENGTH:
            yield Finding(
                NAME_RULE,
                (*base, "name"),
                f"CronJob name {name!r}: must be no more than {CRONJOB_NAME_MAX_LENGTH} "
                "characters (Job names get an 11-character suffix)",
            )
    if isinstance(generate_name, str) and generate_name and not name and name_format:
        problem = rule(generate_name, prefix=True)
        if problem is not None:
            yield Finding(
                NAME_RULE, (*base, "generateName"), f"generateName {generate_name!r}: {problem}"
            )
    namespace = metadata.get("namespace")
    if isinstance(namespace, str) and namespace:
        problem = kubenames.dns_label_problem(namespace)
        if problem is not None:
            yield Finding(NAME_RULE, (*base, "namespace"), f"namespace {namespace!r}: {problem}")
    yield from _finalizer_findings(metadata.get("finalizers"), path=(*base, "finalizers"))
    yield from labels_and_annotations_findings(metadata, path=base)


STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
"""The finalizers that need no domain (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0
pkg/apis/core/helper/helpers.go standardFinalizers)."""


def _finalizer_findings(finalizers: Any, *, path: Path) -> Iterator[Finding]:
    """Each finalizer is a qualified name, and one without a domain a standard finalizer
    (k8s.io/apimachinery v0.37.2 pkg/api/validation/objectmeta.go ValidateFinalizerName and
    k8s.io/kubernetes v1.37.2 pkg/apis/core/validation/validation.go
    validateKubeFinalizerName)."""
    if not isinstance(finalizers, list):
        return
    for index, name in enumerate(finalizers):
        if not isinstance(name, str):
            continue
        problem = kubenames.label_key_problem(name)
        if problem is None and "/" not in name and name not in STANDARD_FINALIZERS:
            standard = ", ".join(sorted(STANDARD_FINALIZERS))
            problem = f"a finalizer without a domain must be a standard one ({standard})"
        if problem is not None:
            yield Finding(NAME_RULE, (*path, index), f"finalizer {name!r}: {problem}")


def labels_and_annotations_findings(metadata: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    labels = metadata.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            problem = kubenames.label_key_problem(str(key))
            if problem is not None:
                yield Finding(
                    RULE, (*path, "labels", key), f"label key {key!r}: {problem}", Anchor.KEY
                )
            if isinstance(value, str):
                problem = kubenames.label_value_problem(value)
                if problem is not None:
                    yield Finding(
                        RULE, (*path, "labels", key), f"label {key!r} value {value!r}: {problem}"
                    )
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            problem = kubenames.annotation_key_problem(str(key))
            if problem is not None:
                yield Finding(
                    RULE,
                    (*path, "annotations", key),
                    f"annotation key {key!r}: {problem}",
                    Anchor.KEY,
                )
        texts = {str(k): v for k, v in annotations.items() if isinstance(v, str)}
        problem = kubenames.annotations_size_problem(texts)
        if problem is not None:
            yield Finding(RULE, (*path, "annotations"), f"annotations: {problem}", Anchor.KEY)


TEMPLATE_META_FIELDS = frozenset({"labels", "annotations"})
"""What a ResourceClaimTemplate's ``spec.metadata`` may set; every other ObjectMeta field
"cannot be set" (k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0 pkg/apis/core/validation
ValidateTemplateObjectMeta, allowedTemplateObjectMetaFields)."""


def template_meta_findings(metadata: object, *, path: Path) -> Iterator[Finding]:
    """The metadata a template gives the objects made from it: labels and annotations
    only, each valid."""
    if not isinstance(metadata, dict):
        return  # absent, or a type the schema reports
    for key in sorted(set(metadata) - TEMPLATE_META_FIELDS, key=str):
        if metadata[key] in (None, "", [], {}, 0):
            continue  # an empty field is not set (the server decodes it as the zero value)
        yield Finding(RULE, (*path, key), f"{'.'.join((*map(str, path), str(key)))}: cannot be set")
    yield from labels_and_annotations_findings(metadata, path=path)
