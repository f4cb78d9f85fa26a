"""The kinds the stand-in serves, and which resource.k8s.io versions each release serves."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BY_KIND",
    "BY_PLURAL",
    "KINDS",
    "RESOURCE_GROUP",
    "Kind",
    "major_minor",
    "served_versions",
]

RESOURCE_GROUP = "resource.k8s.io"
_FIRST_VERSION_WITH_V1BETA2 = (1, 33)
_FIRST_VERSION_WITH_V1 = (1, 34)
_FIRST_VERSION_WITHOUT_V1BETA1 = (1, 38)
"""resource.k8s.io/v1beta1 is not served from 1.38 (k8s.io/api@v0.38.0-beta.0
resource/v1beta1/zz_generated.prerelease-lifecycle.go: APILifecycleRemoved 1.38)."""


@dataclass(frozen=True)
class Kind:
    """One served kind: its names, scope and the field selectors it supports."""

    kind: str
    plural: str
    singular: str
    group: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    reset_status_on_create: bool = False
    field_labels: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})


KINDS = (
    Kind(
        "ResourceClaim",
        "resourceclaims",
        "resourceclaim",
        RESOURCE_GROUP,
        namespaced=True,
        status_subresource=True,
        reset_status_on_create=True,
    ),
    Kind(
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        RESOURCE_GROUP,
        namespaced=True,
    ),
    Kind(
        "ResourceSlice",
        "resourceslices",
        "resourceslice",
        RESOURCE_GROUP,
        namespaced=False,
        field_labels=frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
    ),
    Kind("DeviceClass", "deviceclasses", "deviceclass", RESOURCE_GROUP, namespaced=False),
    Kind(
        "Node",
        "nodes",
        "node",
        "",
        namespaced=False,
        short_names=("no",),
        status_subresource=True,
        field_labels=frozenset({"metadata.name", "spec.unschedulable"}),
    ),
    Kind(
        "Event",
        "events",
        "event",
        "",
        namespaced=True,
        short_names=("ev",),
        field_labels=frozenset(
            {
                "metadata.name",
                "metadata.namespace",
                "involvedObject.kind",
                "involvedObject.name",
                "reason",
                "type",
            }
        ),
    ),
)
BY_PLURAL = {k.plural: k for k in KINDS}
BY_KIND = {k.kind: k for k in KINDS}


def served_versions(kubernetes_version: str) -> tuple[str, ...]:
    """resource.k8s.io versions a Kubernetes minor version serves, newest first."""
    minor = major_minor(kubernetes_version)
    if minor >= _FIRST_VERSION_WITHOUT_V1BETA1:
        return ("v1", "v1beta2")
    if minor >= _FIRST_VERSION_WITH_V1:
        return ("v1", "v1beta2", "v1beta1")
    if minor >= _FIRST_VERSION_WITH_V1BETA2:
        return ("v1beta2", "v1beta1")
    return ("v1beta1",)


def major_minor(kubernetes_version: str) -> tuple[int, int]:
    """``(1, 34)`` for "1.34", "v1.34" or "1.34.2"."""
    major, minor = kubernetes_version.removeprefix("v").split(".")[:2]
    return int(major), int(minor)
