"""The chart's two releases as docs/install.md installs them: the driver (``dralet`` in
``dralet``) and the example workload (``dralet-example``, a release of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.install.node import InstallNode
from tests.install.operator import Operator, condition, until, values
from tests.k8sapi import ClusterApi

__all__ = [
    "DAEMONSET",
    "DRIVER",
    "EXAMPLE",
    "EXAMPLE_NAMESPACE",
    "EXAMPLE_POD",
    "NAMESPACE",
    "RELEASE",
    "WAIT_S",
    "driver_pod",
    "example_claims",
    "install_driver",
    "install_example",
    "plugin_dir",
]

DRIVER = "gpu.example.com"
RELEASE, NAMESPACE = "dralet", "dralet"
EXAMPLE, EXAMPLE_NAMESPACE = "dralet-example", "dralet-example"
DAEMONSET = "dralet-kubelet-plugin"
EXAMPLE_POD = "device-consumer"
WAIT_S = 300.0


def plugin_dir(node: InstallNode) -> Path:
    """The driver's own directory on ``node``: ``<kubeletPaths.pluginsDir>/<driver>``."""
    return node.kubelet.plugins_dir / DRIVER


def driver_pod(api: ClusterApi, node: str) -> dict[str, Any] | None:
    for pod in api.list("Pod", namespace=NAMESPACE):
        if pod["spec"].get("nodeName") == node and pod["metadata"]["name"].startswith(DAEMONSET):
            return pod
    return None


def ready_driver_pod(api: ClusterApi, node: str) -> dict[str, Any] | None:
    pod = driver_pod(api, node)
    return pod if pod is not None and condition(pod, "Ready") else None


def install_driver(operator: Operator, nodes: list[InstallNode], *extra: str) -> None:
    """``helm install dralet ...`` with the host paths of ``nodes`` (all alike), then
    ``kubectl rollout status``."""
    operator.install(RELEASE, NAMESPACE, *nodes[0].chart_values(), *extra)
    operator.rollout_status(NAMESPACE, DAEMONSET, WAIT_S)


def install_example(operator: Operator) -> dict[str, Any]:
    """The example release; its pod once Ready (``kubectl wait``)."""
    operator.install(
        EXAMPLE, EXAMPLE_NAMESPACE, *values("driver.enabled=false", "examples.enabled=true")
    )
    return operator.wait_ready(EXAMPLE_NAMESPACE, EXAMPLE_POD, WAIT_S)


def example_claims(api: ClusterApi) -> list[dict[str, Any]]:
    return api.list("ResourceClaim", namespace=EXAMPLE_NAMESPACE)


def prepared(claim: dict[str, Any]) -> bool:
    return f"{DRIVER}/prepared" in (claim["metadata"].get("finalizers") or [])


def uninstall_all(operator: Operator, api: ClusterApi) -> None:
    """The example first, then the driver; waits until the claim and slices are gone."""
    operator.uninstall(EXAMPLE, EXAMPLE_NAMESPACE)
    until(lambda: not example_claims(api) or None, "the example's claim gone", WAIT_S)
    operator.uninstall(RELEASE, NAMESPACE)
    until(lambda: not operator.resourceslices(DRIVER) or None, "the slices gone", WAIT_S)
