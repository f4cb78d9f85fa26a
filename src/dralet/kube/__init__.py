"""The only code that talks to the Kubernetes API server.

Dict in, dict out, on aiohttp: ``transport`` (the server's URL, TLS and auth from a
kubeconfig or the service account), ``client`` (one connection: verbs, retries, watch),
``watching`` (list + watch + relist), ``versions`` (which resource.k8s.io version to
speak), ``shapes`` (converting objects between those versions), ``claims``
(``ClaimClient``, the claim engine's ``ClaimSource``), ``inventory`` (listing claims,
slices and classes for the CLI) and ``slices`` (pure ResourceSlice rules and diffing,
used by the node's publisher). Used by ``dralet.node``
(publisher, claim engine wiring), the CLI and the API stand-in in ``dralet.apiserver``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# name -> module: the client needs aiohttp, so ``import dralet.kube.slices`` (pure
# rules, used by the publisher and device values) must not load it; it is loaded on the
# first use of a name that needs it.
_LAZY = {
    "ClaimClient": "dralet.kube.claims",
    "KubeClient": "dralet.kube.client",
    "connect": "dralet.kube.client",
    "ResourceInventory": "dralet.kube.inventory",
    "list_device_classes": "dralet.kube.inventory",
    "list_resource_claims": "dralet.kube.inventory",
    "list_resource_slices": "dralet.kube.inventory",
    "read_inventory": "dralet.kube.inventory",
    "KubeSettings": "dralet.kube.settings",
    "ApiError": "dralet.kube.status",
    "UnsupportedServerError": "dralet.kube.versions",
    "negotiate_resource_version": "dralet.kube.versions",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dralet.kube' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
