"""Two real kubelets on this machine (their own roots, containerd, bridges and node
names): one ``helm install`` runs a driver pod on each; a workload on each node gets a
device from its own node's driver; node A's driver, with the token its running pod was
given, is refused writing node B's ResourceSlices (the chart's admission policies) and
node B's claim's ``status.devices`` (the API server's own node check from 1.36, the
chart's status policy before); and node A's driver killed leaves node B's claim prepared
and its workload running.

The driver is installed with ``deviceStatus.write``, so its ServiceAccount may patch
claim status at all: a refusal then comes from the node checks, not from RBAC.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import Operator, condition, parse_time, until, values
from tests.k8sapi import PROBE_USER_AGENT, ClusterApi
from tests.k8scluster import Release

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(900)]

TEMPLATE = "single-device"
"""The example release's ResourceClaimTemplate (templates/examples.yaml)."""


def _consumer(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": release.EXAMPLE_NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "device", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {
                    "name": "consumer",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "env; ls -l /dev; sleep 3600"],
                    "resources": {"claims": [{"name": "device"}]},
                }
            ],
        },
    }


def _as_token(api: ClusterApi, token: str, method: str, path: str, body: Any) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(api.cluster.workdir / "ca.crt"))
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method=method)
    request.add_header("Authorization", f"Bearer {token}")
    # A probe acting as the driver, not the driver: the RBAC test leaves it out of the
    # driver's own requests in the audit log.
    request.add_header("User-Agent", PROBE_USER_AGENT)
    request.add_header(
        "Content-Type",
        "application/merge-patch+json" if method == "PATCH" else "application/json",
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def _ready(api: ClusterApi, pod: str) -> dict[str, Any] | None:
    return condition(api.get("Pod", pod, namespace=release.EXAMPLE_NAMESPACE) or {}, "Ready")


def _output(node: InstallNode, pod: str) -> str | None:
    return node.kubelet.container_log(release.EXAMPLE_NAMESPACE, pod, "consumer") or None


def _claim_of(api: ClusterApi, pod: str) -> dict[str, Any]:
    [claim] = [
        c for c in release.example_claims(api) if c["metadata"]["name"].startswith(f"{pod}-")
    ]
    return claim


def _with_status(api: ClusterApi, pod: str) -> dict[str, Any] | None:
    claim = _claim_of(api, pod)
    devices = (claim.get("status") or {}).get("devices") or []
    return claim if any(d["driver"] == release.DRIVER for d in devices) else None


def _minor(k8s_release: Release) -> tuple[int, int]:
    major, minor = k8s_release.minor.split(".")
    return int(major), int(minor)


def test_one_release_drives_two_nodes_each_to_its_own(
    k8s_api: ClusterApi,
    k8s_release: Release,
    two_nodes: list[InstallNode],
    operator: Operator,
) -> None:
    api = k8s_api
    a, b = two_nodes
    release.install_driver(operator, two_nodes, *values("deviceStatus.write=true"))
    pods = {n.name: release.ready_driver_pod(api, n.name) for n in two_nodes}
    assert all(pods.values()), pods
    for name, pod in pods.items():
        assert pod is not None
        ready = parse_time(condition(pod, "Ready")["lastTransitionTime"])  # type: ignore[index]
        took = ready - parse_time(pod["metadata"]["creationTimestamp"])
        print(f"\ninstall-to-Ready ({name}): {took.total_seconds():.0f}s")
    slices = operator.resourceslices(release.DRIVER)
    assert {s["spec"]["nodeName"] for s in slices} == {a.name, b.name}

    # A workload on each node, from the example release's claim template.
    release.install_example(operator)
    api.create(_consumer("consumer-a", a.name))
    api.create(_consumer("consumer-b", b.name))
    for name, node in (("consumer-a", a), ("consumer-b", b)):
        until(functools.partial(_ready, api, name), f"{name} Ready", release.WAIT_S)
        output = until(functools.partial(_output, node, name), f"{name}'s output", release.WAIT_S)
        assert "EXAMPLE_GPU_" in output and "example-gpu" in output, output
        claim = _claim_of(api, name)
        assert claim["status"]["allocation"]["nodeSelector"], claim
        assert release.prepared(claim)
        assert list(node.kubelet.cdi_dir.glob("*.json"))

    # Node A's driver, with its running pod's own token, cannot write node B's slices.
    pod_a = pods[a.name]
    assert pod_a is not None
    token = a.read_in_node(
        a.kubelet.root / "kubelet" / "pods" / pod_a["metadata"]["uid"] / "volumes"
        / "kubernetes.io~projected" / _projected_volume(pod_a) / "token"
    )  # fmt: skip
    [slice_b, *_] = [s for s in slices if s["spec"]["nodeName"] == b.name]
    [slice_a, *_] = [s for s in slices if s["spec"]["nodeName"] == a.name]
    path = "/apis/resource.k8s.io/v1/resourceslices"
    patch = {"metadata": {"labels": {"dralet-test": "x"}}}
    assert _as_token(api, token, "PATCH", f"{path}/{slice_a['metadata']['name']}", patch)[0] == 200
    assert _as_token(api, token, "PATCH", f"{path}/{slice_b['metadata']['name']}", patch)[0] == 403
    stolen = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "stolen"},
        "spec": {**slice_b["spec"], "pool": {**slice_b["spec"]["pool"], "name": "stolen"}},
    }
    assert _as_token(api, token, "POST", path, stolen)[0] == 403

    # Nor node B's claim's device status; its own node's claim it may patch.
    claims = {n: until(functools.partial(_with_status, api, p), f"{p}'s device status", 60)
              for n, p in ((a.name, "consumer-a"), (b.name, "consumer-b"))}  # fmt: skip
    status = "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims/{}/status"
    own = claims[a.name]
    own_path = status.format(release.EXAMPLE_NAMESPACE, own["metadata"]["name"])
    code, text = _as_token(api, token, "PATCH", own_path, {"status": own["status"]})
    assert code == 200, text
    other = claims[b.name]
    other_path = status.format(release.EXAMPLE_NAMESPACE, other["metadata"]["name"])
    code, text = _as_token(api, token, "PATCH", other_path, {"status": {"devices": []}})
    if _minor(k8s_release) >= (1, 36):
        # resourceclaims/driver "associated-node" (k8s.io/kubernetes@v1.37.2
        # pkg/registry/resource/utils.go, AuthorizedForDeviceStatus): 422, the verb A lacks.
        assert code == 422 and "arbitrary-node:patch" in text, text
    else:
        assert code == 403 and "may write the device status of claims allocated" in text, text
    assert _claim_of(api, "consumer-b")["status"]["devices"] == other["status"]["devices"]

    # Node A's driver killed: node B's claim and workload are untouched.
    claim_b = _claim_of(api, "consumer-b")
    specs_b = sorted(b.kubelet.cdi_dir.glob("*.json"))
    os.kill(_driver_pid(a), signal.SIGKILL)
    until(
        lambda: (
            p
            if (p := release.driver_pod(api, a.name))
            and sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or [])
            else None
        ),
        "node A's driver restarted by its kubelet",
        release.WAIT_S,
    )
    after = _claim_of(api, "consumer-b")
    assert after["metadata"]["uid"] == claim_b["metadata"]["uid"]
    assert release.prepared(after)
    assert sorted(b.kubelet.cdi_dir.glob("*.json")) == specs_b
    consumer_b = api.get("Pod", "consumer-b", namespace=release.EXAMPLE_NAMESPACE)
    assert consumer_b is not None and condition(consumer_b, "Ready")
    assert release.ready_driver_pod(api, b.name) is not None

    for name in ("consumer-a", "consumer-b"):
        api.delete("Pod", name, namespace=release.EXAMPLE_NAMESPACE)
    release.uninstall_all(operator, api)
    for node in two_nodes:
        until(functools.partial(_gone, api, node), f"{node.name}'s driver pod gone", 120)
        assert not list(node.kubelet.cdi_dir.glob("*.json"))
        assert not release.plugin_dir(node).exists()


def _gone(api: ClusterApi, node: InstallNode) -> bool | None:
    return release.driver_pod(api, node.name) is None or None


def _projected_volume(pod: dict[str, Any]) -> str:
    [name] = [v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    return str(name)


def _driver_pid(node: InstallNode) -> int:
    flag = "--node-name=" + node.name
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if flag in argv and any(a.endswith("dralet") for a in argv[:2]):
            return int(proc.name)
    raise AssertionError(f"no driver process for {node.name}")
