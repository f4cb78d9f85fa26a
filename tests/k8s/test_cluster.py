"""The real control plane of each release CI builds: what it serves, its feature gates, that
the scheduler places pods on a node the kubelet emulator keeps Ready, and that stopping it
leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest

from dralet import kube
from dralet.kubelet import NodeHeartbeat
from tests.k8sapi import ClusterApi, ClusterApiError
from tests.k8scluster import Cluster, Release
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, K8S_TIMEOUT]

WAIT = 60.0
SERVED_RESOURCE_VERSIONS = {
    "1.37": {"v1", "v1beta2", "v1beta1", "v1alpha3"},
    # v1beta1 is removed in 1.38 (k8s.io/api v0.38.0-beta.0
    # resource/v1beta1/zz_generated.prerelease-lifecycle.go).
    "1.38": {"v1", "v1beta2", "v1alpha3"},
}


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


def test_serves_the_resource_versions_of_its_release(
    k8s_api: ClusterApi, k8s_release: Release
) -> None:
    assert k8s_api.request("GET", "/version")["gitVersion"] == k8s_release.version
    group = k8s_api.request("GET", "/apis/resource.k8s.io")
    served = {v["version"] for v in group["versions"]}
    assert served == SERVED_RESOURCE_VERSIONS[k8s_release.minor]
    assert group["preferredVersion"]["version"] == "v1"
    assert set(k8s_api.versions) <= served


def _feature_gates(k8s_api: ClusterApi) -> dict[str, bool]:
    """Every gate the server knows, and whether it is on (from its metrics)."""
    gates = {}
    for line in k8s_api.request_text("/metrics").splitlines():
        if line.startswith("kubernetes_feature_enabled{"):
            gates[line.split('name="')[1].split('"')[0]] = line.rstrip().endswith(" 1")
    return gates


def test_every_dra_feature_gate_is_on(k8s_api: ClusterApi, k8s_release: Release) -> None:
    gates = _feature_gates(k8s_api)
    wanted = {*k8s_release.feature_gates, *k8s_release.locked_feature_gates}
    assert wanted <= {name for name, on in gates.items() if on}, wanted - set(gates)
    assert not set(k8s_release.removed_feature_gates) & set(gates)


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
    cluster = Cluster(release=k8s_cluster.release, components=("etcd", "kube-apiserver"))
    cluster.start()
    pids = [p.pid for p in cluster.processes.values()]
    workdir = cluster.workdir
    assert workdir.is_dir() and len(pids) == 2
    cluster.stop()
    assert not workdir.exists()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), pid
