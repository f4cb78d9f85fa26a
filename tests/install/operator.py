"""The operator's verbs of the README's "Deploy on a cluster", in its order.

``helm`` is the binary ``make helm`` builds. The ``kubectl`` verbs (``rollout status``,
``wait --for=condition=Ready``, ``get resourceslices``, ``logs``) are the same reads
made through the API with the admin's credentials: no kubectl is built here (it would
be one more long Go build on the CI machine), and each helper names the verb it stands
for. ``logs`` reads the kubelet's log file of the container, which is what the API
server's log endpoint streams from the kubelet.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from tests.k8sapi import ClusterApi

__all__ = ["Operator", "parse_time"]

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "dralet"
HELM_TIMEOUT_S = 300
POLL_S = 0.2

T = TypeVar("T")


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass
class Operator:
    helm_binary: str
    api: ClusterApi
    home: Path

    def helm(self, *args: str) -> str:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.api.cluster.admin_kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        done = subprocess.run(
            [self.helm_binary, *args], env=env, capture_output=True, text=True,
            timeout=HELM_TIMEOUT_S,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def install(self, release: str, namespace: str, *values: str) -> str:
        """``helm install <release> deploy/chart/dralet --namespace <ns> --create-namespace``."""
        return self.helm(
            "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
            *values,
        )  # fmt: skip

    def uninstall(self, release: str, namespace: str) -> str:
        return self.helm("uninstall", release, "-n", namespace, "--wait")

    def rollout_status(self, namespace: str, daemonset: str, within: float) -> dict[str, Any]:
        """``kubectl -n <ns> rollout status daemonset/<name>``: the DaemonSet's status once
        every scheduled pod is updated and available (kubectl's DaemonSet rule)."""

        def done() -> dict[str, Any] | None:
            ds = self.api.request(
                "GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{daemonset}"
            )
            status = ds.get("status") or {}
            desired = status.get("desiredNumberScheduled", 0)
            if (
                desired > 0
                and status.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and status.get("updatedNumberScheduled", 0) >= desired
                and status.get("numberAvailable", 0) >= desired
            ):
                return ds
            return None

        try:
            return until(done, f"daemonset/{daemonset} rolled out", within)
        except AssertionError as error:
            raise AssertionError(f"{error}; its pods: {self.pod_states(namespace)}") from None

    def pod_states(self, namespace: str) -> list[Any]:
        """Each pod's node, phase, conditions and container states, for a failure."""
        return [
            (
                p["metadata"]["name"],
                p["spec"].get("nodeName"),
                p.get("status", {}).get("phase"),
                [(c["type"], c["status"]) for c in p.get("status", {}).get("conditions") or []],
                [c.get("state") for c in p.get("status", {}).get("containerStatuses") or []],
            )
            for p in self.api.list("Pod", namespace=namespace)
        ]

    def wait_ready(self, namespace: str, pod: str, within: float) -> dict[str, Any]:
        """``kubectl -n <ns> wait --for=condition=Ready pod/<name>``."""

        def ready() -> dict[str, Any] | None:
            found = self.api.get("Pod", pod, namespace=namespace)
            return found if found is not None and condition(found, "Ready") else None

        return until(ready, f"pod {namespace}/{pod} Ready", within)

    def resourceslices(self, driver: str) -> list[dict[str, Any]]:
        """``kubectl get resourceslices --field-selector spec.driver=<driver>``."""
        return self.api.list("ResourceSlice", field_selector=f"spec.driver={driver}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind and c["status"] == "True":
            return dict(c)
    return None


def until(check: Callable[[], T | None], what: str, within: float) -> T:
    deadline = time.monotonic() + within
    while (value := check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(POLL_S)
    return value


def values(*pairs: str) -> Sequence[str]:
    """``--set a=b`` for each pair."""
    return [arg for pair in pairs for arg in ("--set", pair)]
