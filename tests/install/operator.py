"""The operator's verbs of docs/install.md, in its order.

``helm`` is the binary ``make helm`` builds, ``kubectl`` the one ``make kubectl`` builds
from the control plane's own Kubernetes module (scripts/kubectl-build), both with the
admin's kubeconfig: ``rollout status``, ``wait --for=condition=Ready``,
``get resourceslices`` and ``logs`` are docs/install.md's commands as it spells them.
Waits for a state to go (slices wiped, a pod gone) poll through the API instead of
starting one kubectl a poll.
"""

from __future__ import annotations

import json
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
KUBECTL_SLACK_S = 30
"""Beyond a kubectl command's own ``--timeout``, before it is killed."""
POLL_S = 0.2

T = TypeVar("T")


def parse_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass
class Operator:
    helm_binary: str
    kubectl_binary: str
    api: ClusterApi
    home: Path

    def _run(self, binary: str, *args: str, timeout: float = HELM_TIMEOUT_S) -> str:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.api.cluster.admin_kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "KUBECACHEDIR": str(self.home / "kube-cache"),
        }
        done = subprocess.run(
            [binary, *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            name = Path(binary).name
            raise AssertionError(f"{name} {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def helm(self, *args: str) -> str:
        return self._run(self.helm_binary, *args)

    def kubectl(self, *args: str, timeout: float = HELM_TIMEOUT_S) -> str:
        return self._run(self.kubectl_binary, *args, timeout=timeout + KUBECTL_SLACK_S)

    def install(self, release: str, namespace: str, *values: str) -> str:
        """``helm install <release> deploy/chart/dralet --namespace <ns> --create-namespace``."""
        return self.helm(
            "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
            *values,
        )  # fmt: skip

    def uninstall(self, release: str, namespace: str) -> str:
        return self.helm("uninstall", release, "-n", namespace, "--wait")

    def rollout_status(self, namespace: str, daemonset: str, within: float) -> None:
        """``kubectl -n <ns> rollout status daemonset/<name>``."""
        try:
            self.kubectl(
                "-n", namespace, "rollout", "status", f"daemonset/{daemonset}",
                f"--timeout={within:.0f}s", timeout=within,
            )  # fmt: skip
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
        """``kubectl -n <ns> wait --for=condition=Ready pod/<name>``; the pod it printed."""
        out = self.kubectl(
            "-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}",
            f"--timeout={within:.0f}s", "-o", "json", timeout=within,
        )  # fmt: skip
        return dict(json.loads(out))

    def get_resourceslices(self, driver: str) -> list[dict[str, Any]]:
        """``kubectl get resourceslices --field-selector spec.driver=<driver>``."""
        out = self.kubectl(
            "get", "resourceslices", f"--field-selector=spec.driver={driver}", "-o", "json"
        )
        return list(json.loads(out)["items"])

    def logs(self, namespace: str, pod: str, container: str = "") -> str:
        """``kubectl -n <ns> logs <pod>`` (the API server streams it from the kubelet)."""
        return self.kubectl("-n", namespace, "logs", pod, *(["-c", container] if container else []))

    def resourceslices(self, driver: str) -> list[dict[str, Any]]:
        """``get_resourceslices`` read through the API, for polls."""
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
