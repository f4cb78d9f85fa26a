"""The real control plane itself: what it serves, that the scheduler places pods on a
node the kubelet emulator keeps Ready, and that stopping it leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest

from dralet import kube
from dralet.kubelet import NodeHeartbeat
from tests.k8sapi import ClusterApi, ClusterApiError
from tests.k8scluster import DRA_FEATURE_GATES, Cluster
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, K8S_TIMEOUT]

WAIT = 60.0


async def eventually(check: object, what: str, within: float = WAIT) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within}s: {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def admin(k8s_api: ClusterApi) -> AsyncIterator[kube.KubeClient]:
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as client:
        yield client


def test_serves_every_resource_version_of_1_37(k8s_api: ClusterApi) -> None:
    assert k8s_api.request("GET", "/version")["gitVersion"] == "v1.37.2"
    group = k8s_api.request("GET", "/apis/resource.k8s.io")
    served = {v["version"] for v in group["versions"]}
    assert {"v1", "v1beta2", "v1beta1"} <= served
    assert group["preferredVersion"]["version"] == "v1"


def test_every_dra_feature_gate_is_on(k8s_api: ClusterApi) -> None:
    metrics = k8s_api.request_text("/metrics")
    enabled = {
        line.split('name="')[1].split('"')[0]
        for line in metrics.splitlines()
        if line.startswith("kubernetes_feature_enabled{") and line.rstrip().endswith(" 1")
    }
    assert set(DRA_FEATURE_GATES) <= enabled, set(DRA_FEATURE_GATES) - enabled


async def test_the_scheduler_binds_a_pod_to_a_node_kept_ready(
    k8s_api: ClusterApi, admin: kube.KubeClient
) -> None:
    heartbeat = NodeHeartbeat(admin, "node-a", interval=1.0)
    task = asyncio.create_task(heartbeat.run())
    try:
        await eventually(lambda: k8s_api.get("Node", "node-a") is not None, "node created")
        k8s_api.wait_for_default_service_account()
        k8s_api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "plain", "namespace": "default"},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            }
        )

        def bound() -> bool:
            pod = k8s_api.get("Pod", "plain", namespace="default") or {}
            return pod.get("spec", {}).get("nodeName") == "node-a"

        await eventually(bound, "pod bound to node-a by kube-scheduler")
        lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"

        def renew_time() -> str:
            try:
                return str(k8s_api.request("GET", lease_path)["spec"]["renewTime"])
            except ClusterApiError:
                return ""

        await eventually(renew_time, "node Lease created")
        first = renew_time()
        await eventually(lambda: renew_time() != first, "lease renewed")
        node = k8s_api.get("Node", "node-a") or {}
        assert not node["spec"].get("taints"), node["spec"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_stop_ends_every_process_and_removes_its_files(k8s_cluster: Cluster) -> None:
    # The session's cluster proves start; a second one (etcd and kube-apiserver are
    # enough to show the clean-up) proves stop.
    cluster = Cluster(components=("etcd", "kube-apiserver"))
    cluster.start()
    pids = [p.pid for p in cluster.processes.values()]
    workdir = cluster.workdir
    assert workdir.is_dir() and len(pids) == 2
    cluster.stop()
    assert not workdir.exists()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), pid
