"""A ServiceAccount holding only what ``dralet conformance --print-rbac`` prints, bound
as docs/conformance.md says, and a kubeconfig that acts as it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dralet.conformance.cluster import rbac
from tests.k8sapi import ClusterApi

__all__ = ["least_privilege_kubeconfig"]

ACCOUNT = "dralet-conformance-ci"
ACCOUNT_NAMESPACE = "default"


def _binding(kind: str, role: str, namespace: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": ACCOUNT}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}],
    }


@contextlib.contextmanager
def least_privilege_kubeconfig(
    api: ClusterApi, *, namespace: str, driver_namespace: str
) -> Iterator[Path]:
    """The run's namespace and the driver's must exist: the workloads and driver-pods
    roles are bound there only (RoleBindings)."""
    made = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}},
        *rbac.roles(),
        _binding("ClusterRoleBinding", rbac.CLUSTER_ROLE, None),
        _binding("RoleBinding", rbac.WORKLOADS_ROLE, namespace),
        _binding("RoleBinding", rbac.DRIVER_PODS_ROLE, driver_namespace),
    ]  # fmt: skip
    try:
        for obj in made:
            api.create(obj, namespace=obj["metadata"].get("namespace"))
        token = api.service_account_token(ACCOUNT_NAMESPACE, ACCOUNT)
        yield api.cluster.write_kubeconfig(f"{ACCOUNT}.kubeconfig", user=ACCOUNT, token=token)
    finally:
        for obj in reversed(made):
            meta = obj["metadata"]
            if api.get(obj["kind"], meta["name"], namespace=meta.get("namespace")) is not None:
                api.delete(obj["kind"], meta["name"], namespace=meta.get("namespace"))
