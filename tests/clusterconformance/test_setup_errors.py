"""``dralet conformance --cluster`` on the real control plane when there is nothing to
judge: exit status 2 with one line, and what the run made before it found out (its
namespace, its DeviceClass) removed. No kubelet is needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.clusterconformance.leftovers import left_behind
from tests.k8sapi import ClusterApi

pytestmark = [pytest.mark.k8s, pytest.mark.cluster_conformance, pytest.mark.timeout(300)]

NAMESPACE = "dralet-conformance"


def run(api: ClusterApi, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "dralet.cli.main", "conformance", "--cluster",
            "--kubeconfig", str(api.cluster.admin_kubeconfig), *args,
        ],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--driver-name", "absent.example.com"], "no node has ResourceSlices of driver"),
        (["--driver-name", "absent.example.com", "--nodes", "no-such-node"], "no node named"),
        (["--driver-name", "gpu.example.com", "--device-class", "no-such-class"], "DeviceClass"),
    ],
)
def test_nothing_to_judge_is_exit_2_and_leaves_nothing(
    k8s_api: ClusterApi, args: list[str], says: str
) -> None:
    done = run(k8s_api, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert f"creating namespace {NAMESPACE}" in done.stderr
    assert "removing what this run created" in done.stderr
    assert left_behind(k8s_api) == []
    assert k8s_api.get("Namespace", NAMESPACE) is None


def test_a_namespace_that_existed_is_kept(k8s_api: ClusterApi) -> None:
    k8s_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    k8s_api.note_namespace(NAMESPACE)
    done = run(k8s_api, "--driver-name", "absent.example.com")
    assert done.returncode == 2, done.stderr
    assert "creating namespace" not in done.stderr
    found = k8s_api.get("Namespace", NAMESPACE)
    assert found is not None and not found["metadata"].get("deletionTimestamp")
    assert left_behind(k8s_api) == []
