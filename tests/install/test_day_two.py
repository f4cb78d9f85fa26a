"""Day two on a real node: ``helm upgrade`` to a new image tag rolls the driver while a
claim stays prepared and its pod keeps running (no restart); the kubelet, then
containerd, restarted under a prepared claim; then both releases uninstalled by the new
driver pod, leaving no finalizer, slice, CDI spec, registration socket or plugin dir
behind.

The new tag is the same image under a second name, loaded the way the first was: what
the rollout exercises is the chart's DaemonSet update, not the image's content.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import CHART, Operator, condition, until, values
from tests.k8sapi import ClusterApi

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(1200)]

NEW_TAG = "0.1.1-upgrade"


def _consumer(api: ClusterApi) -> dict[str, Any]:
    pod = api.get("Pod", release.EXAMPLE_POD, namespace=release.EXAMPLE_NAMESPACE)
    assert pod is not None
    return pod


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or [])


def _unchanged(api: ClusterApi, before: dict[str, Any], claim_uid: str, what: str) -> None:
    now = _consumer(api)
    assert now["metadata"]["uid"] == before["metadata"]["uid"], what
    assert _restarts(now) == 0, f"{what}: the workload restarted"
    assert condition(now, "Ready"), what
    claims = release.example_claims(api)
    assert [c["metadata"]["uid"] for c in claims] == [claim_uid], what
    assert release.prepared(claims[0]), what


def _registrations(node: InstallNode, pod: dict[str, Any]) -> int:
    log = node.kubelet.container_log(release.NAMESPACE, pod["metadata"]["name"], "plugin")
    return log.count("registered with the kubelet")


def _registered_again(node: InstallNode, pod: dict[str, Any], before: int) -> bool | None:
    return _registrations(node, pod) > before or None


def _node_ready(api: ClusterApi, node: InstallNode) -> bool | None:
    return bool(condition(api.get("Node", node.name) or {}, "Ready")) or None


def test_upgrade_and_node_restarts_keep_a_prepared_claim_and_its_pod(
    k8s_api: ClusterApi, node: InstallNode, operator: Operator
) -> None:
    api = k8s_api
    release.install_driver(operator, [node])
    consumer = release.install_example(operator)
    [claim] = release.example_claims(api)
    claim_uid = claim["metadata"]["uid"]
    specs = sorted(p.name for p in node.kubelet.cdi_dir.glob("*.json"))
    assert specs
    old = release.driver_pod(api, node.name)
    assert old is not None

    # helm upgrade to a new image tag: the DaemonSet rolls; the claim and pod stay.
    node.ctr("images", "tag", "--force", "docker.io/library/dralet:0.1.0",
             f"docker.io/library/dralet:{NEW_TAG}")  # fmt: skip
    operator.helm(
        "upgrade", release.RELEASE, str(CHART), "-n", release.NAMESPACE,
        "--reuse-values", *values(f"image.tag={NEW_TAG}"),
    )  # fmt: skip
    operator.rollout_status(release.NAMESPACE, release.DAEMONSET, release.WAIT_S)
    new = until(
        lambda: (
            p
            if (p := release.ready_driver_pod(api, node.name))
            and p["metadata"]["uid"] != old["metadata"]["uid"]
            and api.get("Pod", old["metadata"]["name"], namespace=release.NAMESPACE) is None
            else None
        ),
        "the new driver pod Ready and the old one gone",
        release.WAIT_S,
    )
    assert new["spec"]["containers"][0]["image"].endswith(f":{NEW_TAG}")
    _unchanged(api, consumer, claim_uid, "after helm upgrade")
    assert sorted(p.name for p in node.kubelet.cdi_dir.glob("*.json")) == specs

    # The kubelet restarted, then containerd, with the claim prepared.
    for which in ("kubelet", "containerd"):
        registered = _registrations(node, new)
        node.restart(which)
        until(lambda: _node_ready(api, node), f"the node Ready after {which} restarted", 120)
        if which == "kubelet":
            # The new kubelet finds the driver's registration socket and registers it again.
            until(
                functools.partial(_registered_again, node, new, registered),
                "the driver registered with the restarted kubelet",
                release.WAIT_S,
            )
        until(
            lambda: release.ready_driver_pod(api, node.name),
            f"the driver Ready after {which} restarted",
            release.WAIT_S,
        )
        _unchanged(api, consumer, claim_uid, f"after the {which} restart")
        assert sorted(p.name for p in node.kubelet.cdi_dir.glob("*.json")) == specs

    # Uninstalled by the new pod: it unprepares the claim the old one prepared.
    release.uninstall_all(operator, api)
    assert not list(node.kubelet.cdi_dir.iterdir())
    until(lambda: release.driver_pod(api, node.name) is None or None, "driver pod gone", 120)
    assert not list(node.kubelet.registry_dir.iterdir())
    # The last driver pod held no claim when it stopped: it removed its directory.
    assert not release.plugin_dir(node).exists()
