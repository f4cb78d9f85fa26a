"""``helm uninstall`` of the driver while a claim is still prepared, on a real node.

What happens, and what docs/deploy.md says: the workload keeps running with its device;
the claim keeps the driver's finalizer and its CDI spec stays (nothing is released
that a container still holds); the kubelet wipes the driver's ResourceSlices.
Deleting the workload then cannot finish while no driver is registered: the kubelet
cannot unprepare, so the pod stays Terminating, its claim and spec in place.
Installing the driver again lets the kubelet unprepare: the pod, the claim (finalizer
removed) and the spec go. The driver's plugin dir stays while it holds the claim's record
and goes with the last uninstall.
"""

from __future__ import annotations

import time

import pytest
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import Operator, condition, until
from tests.k8sapi import ClusterApi

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(900)]

HOLD_S = 45.0
"""How long the workload's deletion is watched not finishing while no driver runs
(longer than the kubelet's unprepare retries and its 30s wait before wiping slices)."""


def test_uninstalling_the_driver_under_a_prepared_claim_releases_nothing_until_it_returns(
    k8s_api: ClusterApi, node: InstallNode, operator: Operator
) -> None:
    api = k8s_api
    release.install_driver(operator, [node])
    release.install_example(operator)
    specs = sorted(node.kubelet.cdi_dir.glob("*.json"))
    assert specs

    operator.uninstall(release.RELEASE, release.NAMESPACE)
    until(lambda: release.driver_pod(api, node.name) is None or None, "driver gone", 120)
    pod = api.get("Pod", release.EXAMPLE_POD, namespace=release.EXAMPLE_NAMESPACE)
    assert pod is not None and condition(pod, "Ready"), "the workload kept running"
    [claim] = release.example_claims(api)
    assert release.prepared(claim)
    assert sorted(node.kubelet.cdi_dir.glob("*.json")) == specs
    # The driver held a claim when it stopped: its directory, with the record, stays.
    assert (release.plugin_dir(node) / "claims.db").exists()
    # The kubelet wipes the departed driver's slices (after its 30s wiping delay).
    until(lambda: not operator.resourceslices(release.DRIVER) or None, "slices wiped", 120)

    # The workload deleted with no driver: it cannot finish, and nothing is released.
    operator.helm("uninstall", release.EXAMPLE, "-n", release.EXAMPLE_NAMESPACE)
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        pod = api.get("Pod", release.EXAMPLE_POD, namespace=release.EXAMPLE_NAMESPACE)
        assert pod is not None and pod["metadata"].get("deletionTimestamp")
        [claim] = release.example_claims(api)
        assert release.prepared(claim)
        assert sorted(node.kubelet.cdi_dir.glob("*.json")) == specs
        time.sleep(1)

    # The driver back: the kubelet unprepares, and everything goes.
    release.install_driver(operator, [node])
    until(
        lambda: (
            api.get("Pod", release.EXAMPLE_POD, namespace=release.EXAMPLE_NAMESPACE) is None or None
        ),
        "the workload gone once the driver is back",
        release.WAIT_S,
    )
    until(lambda: not release.example_claims(api) or None, "the claim gone", release.WAIT_S)
    assert not list(node.kubelet.cdi_dir.glob("*.json"))
    operator.uninstall(release.RELEASE, release.NAMESPACE)
    until(lambda: not operator.resourceslices(release.DRIVER) or None, "slices gone", 120)
    until(lambda: release.driver_pod(api, node.name) is None or None, "driver gone", 120)
    assert not release.plugin_dir(node).exists()
