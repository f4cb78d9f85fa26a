"""docs/install.md's install, done on a real node: the image built by
``make image`` loaded into the kubelet's containerd, ``helm install`` of the chart into
the real control plane, the DaemonSet rolled out, the example release's pod getting its
device, and both releases uninstalled without leaving anything behind.

The driver pod runs as the chart runs it (read-only root, every capability dropped, no
privilege escalation, RuntimeDefault seccomp, its own ServiceAccount token bound to the
pod and node): that is read from the running process and from the API server's audit log,
not from the pod spec. Figures (install-to-Ready, pod created to running) are printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.install.conftest import BuiltImage
from tests.install.node import InstallNode
from tests.install.operator import Operator, condition, parse_time, until, values
from tests.install.release import (
    DAEMONSET,
    DRIVER,
    EXAMPLE,
    EXAMPLE_NAMESPACE,
    EXAMPLE_POD,
    NAMESPACE,
    RELEASE,
    WAIT_S,
    driver_pod,
)
from tests.k8sapi import ClusterApi

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(900)]

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


def _driver_process(node: InstallNode) -> int:
    """The pid of the driver running for this node (its plugin dir is in its flags)."""
    flag = f"--plugin-dir={node.kubelet.plugins_dir / DRIVER}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if flag in argv and any(a.endswith(b"dralet") for a in argv[:2]):
            return int(proc.name)
    raise AssertionError(f"no driver process with {flag.decode()}")


def _status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _root_mount_options(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError("no root mount")


def _driver_requests(api: ClusterApi, pod: dict[str, Any]) -> list[dict[str, Any]]:
    account = f"system:serviceaccount:{NAMESPACE}:{pod['spec']['serviceAccountName']}"
    return [
        e
        for e in api.cluster.audit_events()
        if e["user"]["username"] == account
        and (e["user"].get("extra") or {}).get(POD_NAME_EXTRA) == [pod["metadata"]["name"]]
    ]


def test_the_chart_runs_on_a_real_node_and_its_example_gets_a_device(
    k8s_api: ClusterApi, node: InstallNode, image: BuiltImage, operator: Operator
) -> None:
    api = k8s_api
    print(f"\nimage: {image.report}")

    # helm install; kubectl rollout status; kubectl get resourceslices
    operator.install(RELEASE, NAMESPACE, *node.chart_values())
    # The moment each is first seen: the pod Ready, and then whether its slices exist.
    first_ready: dict[str, Any] = {}

    def ready_pod() -> dict[str, Any] | None:
        pod = driver_pod(api, node.name)
        if pod is None or not condition(pod, "Ready"):
            return None
        first_ready["slices"] = operator.resourceslices(DRIVER)
        return pod

    pod = until(ready_pod, "the driver pod Ready", WAIT_S)
    operator.rollout_status(NAMESPACE, DAEMONSET, WAIT_S)
    # Ready means registered and published: when the pod was first seen Ready its
    # slices were already there, created before the Ready transition.
    assert first_ready["slices"], "the driver pod was Ready before its slices were published"
    ready_at = parse_time(condition(pod, "Ready")["lastTransitionTime"])  # type: ignore[index]
    slices = operator.get_resourceslices(DRIVER)
    assert {s["spec"]["nodeName"] for s in slices} == {node.name}
    assert all(parse_time(s["metadata"]["creationTimestamp"]) <= ready_at for s in slices)
    created = parse_time(pod["metadata"]["creationTimestamp"])
    print(f"install-to-Ready ({node.name}): {(ready_at - created).total_seconds():.0f}s")
    log = operator.logs(NAMESPACE, pod["metadata"]["name"], "plugin")
    assert "registered with the kubelet" in log, log[-2000:]

    # As the chart runs it: read from the running process.
    pid = _driver_process(node)
    status = _status_fields(pid)
    assert int(status["CapEff"], 16) == 0, status
    assert int(status["CapBnd"], 16) == 0, status
    assert status["NoNewPrivs"] == "1", status
    assert status["Seccomp"] == "2", status  # a filter: RuntimeDefault
    assert "ro" in _root_mount_options(pid)
    # Its requests carry its own pod-bound token: the pod's and its node's names.
    requests = until(lambda: _driver_requests(api, pod) or None, "the driver's requests", WAIT_S)
    assert all(e["user"]["extra"][NODE_NAME_EXTRA] == [node.name] for e in requests)
    assert "resourceslices" in {e.get("objectRef", {}).get("resource") for e in requests}

    # The example release: helm install; kubectl wait; kubectl logs
    operator.install(
        EXAMPLE, EXAMPLE_NAMESPACE, *values("driver.enabled=false", "examples.enabled=true")
    )
    consumer = operator.wait_ready(EXAMPLE_NAMESPACE, EXAMPLE_POD, WAIT_S)
    running = parse_time(condition(consumer, "Ready")["lastTransitionTime"])  # type: ignore[index]
    took = running - parse_time(consumer["metadata"]["creationTimestamp"])
    print(f"example pod created to running: {took.total_seconds():.0f}s")
    output = until(
        lambda: operator.logs(EXAMPLE_NAMESPACE, EXAMPLE_POD) or None, "the example's output", 60
    )
    assert "EXAMPLE_GPU_" in output and "=GPU-" in output, output
    assert "example-gpu" in output, output
    claims = api.list("ResourceClaim", namespace=EXAMPLE_NAMESPACE)
    assert [f"{DRIVER}/prepared" in (c["metadata"].get("finalizers") or []) for c in claims] == [
        True
    ]
    assert list(node.kubelet.cdi_dir.glob("*.json"))

    # helm uninstall, the example first, then the driver: nothing left behind.
    operator.uninstall(EXAMPLE, EXAMPLE_NAMESPACE)
    until(
        lambda: not api.list("ResourceClaim", namespace=EXAMPLE_NAMESPACE) or None,
        "the example's claim gone (its finalizer removed at unprepare)",
        WAIT_S,
    )
    assert not list(node.kubelet.cdi_dir.iterdir())
    operator.uninstall(RELEASE, NAMESPACE)
    until(lambda: not operator.resourceslices(DRIVER) or None, "the slices gone", WAIT_S)
    until(lambda: driver_pod(api, node.name) is None or None, "the driver pod gone", WAIT_S)
    left = sorted(str(p) for p in node.kubelet.registry_dir.iterdir())
    assert not left, json.dumps(left)
    # The driver held no claim when it stopped: its own directory went with it.
    assert not (node.kubelet.plugins_dir / DRIVER).exists()
    assert node.kubelet.plugins_dir.is_dir()
