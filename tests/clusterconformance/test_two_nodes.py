"""``dralet conformance --cluster`` without ``--nodes`` on two real kubelets: it finds
both nodes from the driver's ResourceSlices and runs every case on each, one after the
other, each pod on its own node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dralet.conformance.cluster import CASE_NAMES
from tests.clusterconformance.leftovers import left_behind
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import Operator, until
from tests.k8sapi import ClusterApi

pytestmark = [
    pytest.mark.install,
    pytest.mark.k8s,
    pytest.mark.e2e,
    pytest.mark.cluster_conformance,
    pytest.mark.timeout(1200),
]

DRIVER_SELECTOR = "app.kubernetes.io/instance=dralet,app.kubernetes.io/component=kubelet-plugin"


def test_every_node_the_driver_serves_is_checked(
    k8s_api: ClusterApi, two_nodes: list[InstallNode], helm: str, kubectl: str, tmp_path: Path
) -> None:
    api = k8s_api
    operator = Operator(helm, kubectl, api, tmp_path / "helm")
    release.install_driver(operator, two_nodes)
    until(
        lambda: (
            len({s["spec"]["nodeName"] for s in operator.resourceslices(release.DRIVER)}) == 2
            or None
        ),
        "slices of both nodes",
        release.WAIT_S,
    )

    done = subprocess.run(
        [
            sys.executable, "-m", "dralet.cli.main", "conformance", "--cluster",
            "--kubeconfig", str(api.cluster.admin_kubeconfig), "--driver-name", release.DRIVER,
            "--driver-namespace", release.NAMESPACE, "--driver-selector", DRIVER_SELECTOR,
            "--timeout", "60", "-o", "json",
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    report = json.loads(done.stdout)
    print(f"\ntwo nodes: the report\n{done.stdout}")

    assert done.returncode == 0, (report, done.stderr)
    names = sorted(node.name for node in two_nodes)
    assert report["nodes"] == names
    assert [(c["node"], c["name"], c["status"]) for c in report["cases"]] == [
        (node, name, "pass") for node in names for name in CASE_NAMES
    ]
    for case in report["cases"]:
        if case["name"] == "claim.allocated":
            # "<claim>: <pool>/<device>": the example driver's pool is its node's name.
            assert f": {case['node']}/" in case["message"], case
    assert left_behind(api) == []
    operator.uninstall(release.RELEASE, release.NAMESPACE)
    until(lambda: not operator.resourceslices(release.DRIVER) or None, "slices gone", 120)
