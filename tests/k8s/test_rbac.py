"""The chart's RBAC is exactly what the driver uses: every request the driver makes in its
life (publish, repair, remove a foreign pool, republish after a device change, prepare and
unprepare, fail closed with an Event) is allowed, and every verb the ClusterRole grants is
used. The real kube-apiserver's audit log is the witness."""

from __future__ import annotations

import datetime
import time

import pytest

from dralet.kubelet import KubeletClaim
from tests import claimstore
from tests.k8s.drivernode import DRIVER, NODE, Node, eventually
from tests.k8sapi import PROBE_USER_AGENT, driver_account, driver_identity
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, pytest.mark.e2e, K8S_TIMEOUT]


def granted() -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for role in driver_identity()
        if role["kind"] in ("ClusterRole", "Role")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def slices(node: Node) -> list[dict[str, object]]:
    return node.api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}")


async def test_the_driver_uses_exactly_the_verbs_deploy_grants(node: Node) -> None:
    api = node.api
    since = node.started  # earlier events are other tests' drivers, on this account too
    [published] = await eventually(lambda: slices(node), "published")

    # The kubelet (or an admin) deletes the slice: the driver puts it back.
    api.delete("ResourceSlice", published["metadata"]["name"])
    await eventually(
        lambda: [s for s in slices(node) if s["metadata"]["name"] != published["metadata"]["name"]],
        "slice re-created",
    )
    # A pool of this node and driver the driver does not publish: it is removed.
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "foreign"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": "other", "generation": 0, "resourceSliceCount": 1},
                "devices": [],
            },
        }
    )
    await eventually(lambda: api.get("ResourceSlice", "foreign") is None, "foreign pool removed")
    # More devices after a restart: the pool is republished.
    await node.restart_driver("--gpus", "6")
    await eventually(
        lambda: sum(len(s["spec"]["devices"]) for s in slices(node)) == 6,  # type: ignore[index, arg-type]
        "six devices published",
    )

    # Prepare a claim (finalizer added), then fail closed on a corrupt checkpoint (Event).
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "held", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
            },
        }
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "holder", "namespace": "default"},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}],
            },
        }
    )
    claim = await eventually(
        lambda: (
            (c := api.get("ResourceClaim", "held", namespace="default"))
            and c.get("status", {}).get("reservedFor")
            and c
        ),
        "claim allocated and reserved",
    )
    ref = KubeletClaim("default", claim["metadata"]["uid"], "held")
    assert (await node.plugin.prepare([ref])).kubelet_error == "", node.driver.log()
    assert (await node.plugin.unprepare([ref])).kubelet_error == "", node.driver.log()
    assert (await node.plugin.prepare([ref])).kubelet_error == "", node.driver.log()
    await node.driver.terminate()
    claimstore.damage_store(node.paths.store)
    await node.restart_driver()
    await eventually(
        lambda: [
            e
            for e in api.list("Event", namespace="default")
            if e.get("reason") == "CheckpointCorrupt"
        ],
        "CheckpointCorrupt event",
    )

    user = "system:serviceaccount:{}:{}".format(*driver_account())
    deadline = time.monotonic() + 10
    used: set[tuple[str, str, str]] = set()
    denied: list[str] = []
    while True:
        for event in api.cluster.audit_events():
            stamp = datetime.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
            if event["user"]["username"] != user or stamp < since or "objectRef" not in event:
                continue
            if event.get("userAgent") == PROBE_USER_AGENT:
                continue  # the admission-policy tests acting as the driver, not the driver
            ref_ = event["objectRef"]
            key = (ref_.get("apiGroup", ""), ref_["resource"], event["verb"])
            used.add(key)
            if event.get("responseStatus", {}).get("code") == 403:
                denied.append(f"{event['verb']} {event['requestURI']}")
        if ("", "events", "create") in used or time.monotonic() > deadline:
            break
    assert denied == [], f"the driver was refused: {denied}"
    allowed = granted()
    assert used <= allowed, f"used but not granted: {sorted(used - allowed)}"
    assert allowed <= used, f"granted but never used (excess permission): {sorted(allowed - used)}"
