"""An in-process Kubernetes API server stand-in for the DRA kinds, on aiohttp.

Serves ResourceClaim (with its ``status`` subresource), ResourceClaimTemplate,
ResourceSlice, DeviceClass (resource.k8s.io), Node and Event (core v1) over HTTP on
127.0.0.1 for the configured Kubernetes version ("1.32" serves v1beta1 only; "1.34"
serves v1, v1beta2 and v1beta1; ``kinds``). Objects live once, in v1 shape, in the
``store``, which gives them the semantics drivers depend on; ``http`` serves it with
``patches``, ``selectors`` and ``discovery``. Every written object is checked against
the strict schema of its version and kind, and the device rules of ``dralet.kube.slices``
(``validity``), and refused with 422 Invalid.

``ApiServer`` runs in the caller's event loop; ``ApiServerThread`` runs one in a
background thread, and ``python -m dralet.apiserver`` in its own process (the CLI demo).
"""

from dralet.apiserver.errors import ApiStatusError
from dralet.apiserver.http import ApiServer
from dralet.apiserver.kinds import served_versions
from dralet.apiserver.kubeconfig import write_kubeconfig
from dralet.apiserver.patches import json_patch, merge_patch
from dralet.apiserver.settings import ApiServerSettings
from dralet.apiserver.store import WriteRecord
from dralet.apiserver.thread import ApiServerThread
from dralet.apiserver.validity import schema_errors

__all__ = [
    "ApiServer",
    "ApiServerSettings",
    "ApiServerThread",
    "ApiStatusError",
    "WriteRecord",
    "json_patch",
    "merge_patch",
    "schema_errors",
    "served_versions",
    "write_kubeconfig",
]
