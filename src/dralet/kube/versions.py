"""Which resource.k8s.io version to speak: the newest one the server serves.

Kubernetes 1.32 serves only v1beta1, 1.33 adds v1beta2, 1.34 adds v1; dralet reads
claims and writes slices in whichever of these is newest on the server it talks to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dralet import errors
from dralet.kube import resources

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["UnsupportedServerError", "negotiate_resource_version", "newest_supported"]


class UnsupportedServerError(errors.PermanentError):
    """The server serves no resource.k8s.io version that dralet speaks."""


def newest_supported(served: list[str]) -> str:
    """The newest of dralet's versions among ``served``."""
    for version in resources.RESOURCE_VERSIONS:
        if version in served:
            return version
    raise UnsupportedServerError(
        f"the API server serves resource.k8s.io versions {served or 'none'}; dralet needs one "
        f"of {', '.join(resources.RESOURCE_VERSIONS)} (before 1.34 the "
        "DynamicResourceAllocation gate and the API version must be enabled)"
    )


async def negotiate_resource_version(client: KubeClient) -> str:
    """Ask the server (discovery) and pick the newest resource.k8s.io version it serves."""
    return newest_supported(await client.served_versions(resources.RESOURCE_GROUP))
