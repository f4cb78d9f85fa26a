"""The least privilege a cluster run needs, as ClusterRoles: exactly the verbs
``runner`` uses, nothing else. Printed by ``dralet conformance --cluster --print-rbac``.

Three roles, so each can be bound only as wide as it must be:
``dralet-conformance`` (cluster-scoped reads and the run's DeviceClass and namespace;
a ClusterRoleBinding), ``dralet-conformance-workloads`` (pods and claims; a RoleBinding
in the run's namespace when it exists beforehand, else a ClusterRoleBinding) and
``dralet-conformance-driver-pods`` (deleting the driver's pods for the driver.* cases;
a RoleBinding in the driver's namespace). Discovery and ``/version`` need no rule:
every authenticated user may read them (the ``system:discovery`` and
``system:public-info-viewer`` ClusterRoles).
"""

from __future__ import annotations

from typing import Any

from dralet.conformance.cluster.objects import MANAGED_BY

__all__ = ["CLUSTER_ROLE", "DRIVER_PODS_ROLE", "WORKLOADS_ROLE", "cluster_role", "roles"]

CLUSTER_ROLE = "dralet-conformance"
WORKLOADS_ROLE = "dralet-conformance-workloads"
DRIVER_PODS_ROLE = "dralet-conformance-driver-pods"
RESOURCE = "resource.k8s.io"

_RULES: dict[str, list[dict[str, Any]]] = {
    CLUSTER_ROLE: [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [RESOURCE], "resources": ["resourceslices"], "verbs": ["list"]},
        {
            "apiGroups": [RESOURCE],
            "resources": ["deviceclasses"],
            "verbs": ["get", "create", "delete"],
        },
    ],
    WORKLOADS_ROLE: [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
        {
            "apiGroups": [RESOURCE],
            "resources": ["resourceclaims"],
            "verbs": ["get", "list", "create", "delete"],
        },
        {
            "apiGroups": [RESOURCE],
            "resources": ["resourceclaimtemplates"],
            "verbs": ["list", "create", "delete"],
        },
    ],
    DRIVER_PODS_ROLE: [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
    ],
}


def cluster_role(name: str) -> dict[str, Any]:
    """One of the three ClusterRoles, by name."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "rules": _RULES[name],
    }


def roles() -> list[dict[str, Any]]:
    return [cluster_role(name) for name in _RULES]
