"""The only code that talks to the Kubernetes API server.

Dict in, dict out, on the official client's asyncio package (``kubernetes.aio``):
``client`` (one connection: verbs, retries, watch), ``watching`` (list + watch + relist),
``versions`` (which resource.k8s.io version to speak), ``shapes`` (converting objects
between those versions), ``claims`` (``ClaimClient``, the claim engine's ``ClaimSource``),
``inventory`` (listing claims, slices and classes for the CLI) and ``slices`` (pure
ResourceSlice rules and diffing, used by the node's publisher). Used by ``dralet.node``
(publisher, ledger wiring), the CLI and the API stand-in in ``dralet.testing``.
"""

from dralet.kube.claims import ClaimClient
from dralet.kube.client import KubeClient, connect
from dralet.kube.inventory import (
    ResourceInventory,
    list_device_classes,
    list_resource_claims,
    list_resource_slices,
    read_inventory,
)
from dralet.kube.settings import KubeSettings
from dralet.kube.status import ApiError
from dralet.kube.versions import UnsupportedServerError, negotiate_resource_version

__all__ = [
    "ApiError",
    "ClaimClient",
    "KubeClient",
    "KubeSettings",
    "ResourceInventory",
    "UnsupportedServerError",
    "connect",
    "list_device_classes",
    "list_resource_claims",
    "list_resource_slices",
    "negotiate_resource_version",
    "read_inventory",
]
