"""The Kubernetes resources dralet reads and writes, and the URL paths that serve them.

A ``Resource`` is one kind at one served version; the same kind at another version is
another ``Resource``. Building paths here keeps every request in ``dralet.kube`` and the
API stand-in in ``dralet.apiserver`` speaking the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EVENTS",
    "NODES",
    "PODS",
    "RESOURCE_GROUP",
    "RESOURCE_VERSIONS",
    "Resource",
    "device_classes",
    "device_taint_rules",
    "resource_claim_templates",
    "resource_claims",
    "resource_slices",
]

RESOURCE_GROUP = "resource.k8s.io"
"""The API group of Dynamic Resource Allocation."""

RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")
"""The resource.k8s.io versions dralet speaks, newest first."""


@dataclass(frozen=True)
class Resource:
    """One kind of object at one API version."""

    group: str
    """API group; empty for the core group (Node)."""
    version: str
    """API version within the group, e.g. ``v1beta1``."""
    plural: str
    """The resource name in URLs, e.g. ``resourceslices``."""
    kind: str
    """The ``kind`` of one object, e.g. ``ResourceSlice``."""
    namespaced: bool
    """Whether objects live in a namespace."""

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of objects of this resource."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """The URL path of the collection, or of one object when ``name`` is given."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        path = f"{root}/{self.plural}"
        if name is not None:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path


NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
"""Core v1 Nodes, the owners of a node's ResourceSlices."""

PODS = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
"""Core v1 Pods, which the scheduler places with their claims."""

EVENTS = Resource(group="", version="v1", plural="events", kind="Event", namespaced=True)
"""Core v1 Events, how the driver tells operators about a problem on its node."""


def resource_claims(version: str) -> Resource:
    return Resource(RESOURCE_GROUP, version, "resourceclaims", "ResourceClaim", namespaced=True)


def resource_claim_templates(version: str) -> Resource:
    return Resource(
        RESOURCE_GROUP,
        version,
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        namespaced=True,
    )


def resource_slices(version: str) -> Resource:
    return Resource(RESOURCE_GROUP, version, "resourceslices", "ResourceSlice", namespaced=False)


def device_classes(version: str) -> Resource:
    return Resource(RESOURCE_GROUP, version, "deviceclasses", "DeviceClass", namespaced=False)


def device_taint_rules(version: str) -> Resource:
    return Resource(
        RESOURCE_GROUP, version, "devicetaintrules", "DeviceTaintRule", namespaced=False
    )
