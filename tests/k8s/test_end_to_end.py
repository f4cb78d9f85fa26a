"""End to end on the real control plane: the example driver runs as ``dralet run`` with
its ServiceAccount from deploy/, publishes its ResourceSlice; kube-controller-manager makes
the claim of a pod's ResourceClaimTemplate, kube-scheduler allocates it and binds the pod;
the kubelet emulator prepares it with the driver, and unprepares it when the pod is
deleted; the driver's finalizer goes and the claim is released."""

from __future__ import annotations

from typing import Any

import pytest

from dralet.kubelet import KubeletClaim
from tests.k8s.drivernode import DRIVER, NODE, Node, eventually
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, pytest.mark.e2e, K8S_TIMEOUT]

NS = "default"


def pod(name: str, claim: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", **claim}],
        },
    }


async def run_pod(node: Node, pod_name: str) -> tuple[KubeletClaim, dict[str, Any]]:
    """Wait for the scheduler to bind the pod, then prepare its claim as the kubelet does."""
    api = node.api

    def bound() -> dict[str, Any] | None:
        current = api.get("Pod", pod_name, namespace=NS) or {}
        statuses = current.get("status", {}).get("resourceClaimStatuses") or []
        if current.get("spec", {}).get("nodeName") != NODE:
            return None
        return current if statuses or "resourceClaimName" in str(current["spec"]) else None

    current = await eventually(bound, f"pod {pod_name} bound to {NODE}")
    statuses = current.get("status", {}).get("resourceClaimStatuses") or []
    claim_name = (
        statuses[0]["resourceClaimName"]
        if statuses
        else current["spec"]["resourceClaims"][0]["resourceClaimName"]
    )
    claim = api.get("ResourceClaim", claim_name, namespace=NS) or {}
    allocation = claim["status"]["allocation"]
    [result] = allocation["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, NODE)
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [current["metadata"]["uid"]]
    ref = KubeletClaim(NS, claim["metadata"]["uid"], claim_name)
    prepared = await node.plugin.prepare([ref])
    assert prepared.kubelet_error == "", node.driver.log()
    ids = prepared.cdi_ids(ref.uid)
    assert ids and all(i.startswith(f"{DRIVER}/") for i in ids), ids
    [device] = prepared.claims[ref.uid].devices
    assert (device.pool_name, device.device_name) == (NODE, result["device"])
    finalizers = (api.get("ResourceClaim", claim_name, namespace=NS) or {})["metadata"][
        "finalizers"
    ]
    assert f"{DRIVER}/prepared" in finalizers
    return ref, claim


async def delete_pod(node: Node, pod_name: str, ref: KubeletClaim) -> None:
    """The kubelet's part of a pod deletion: unprepare, then confirm the deletion."""
    api = node.api
    api.delete("Pod", pod_name, namespace=NS)
    await eventually(
        lambda: (
            (api.get("Pod", pod_name, namespace=NS) or {})
            .get("metadata", {})
            .get("deletionTimestamp")
        ),
        "pod marked for deletion",
    )
    unprepared = await node.plugin.unprepare([ref])
    assert unprepared.kubelet_error == "", node.driver.log()

    def finalizer_removed() -> bool:
        # The answer follows the local teardown; the finalizer removal it owes comes after.
        claim = api.get("ResourceClaim", ref.name, namespace=NS)
        return claim is None or f"{DRIVER}/prepared" not in (
            claim["metadata"].get("finalizers") or []
        )

    await eventually(finalizer_removed, "the driver's finalizer removed")
    api.request(
        "DELETE", api.path("Pod", name=pod_name, namespace=NS), query={"gracePeriodSeconds": "0"}
    )


async def test_pod_with_a_claim_template(node: Node) -> None:
    api = node.api
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NS},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]
                    }
                }
            },
        }
    )
    api.create(pod("train", {"resourceClaimTemplateName": "one-gpu"}))
    ref, claim = await run_pod(node, "train")
    assert claim["metadata"]["ownerReferences"][0]["name"] == "train"

    await delete_pod(node, "train", ref)
    # The claim made for the pod goes with it once nothing holds it.
    await eventually(
        lambda: api.get("ResourceClaim", ref.name, namespace=NS) is None, "claim removed"
    )


def oldest_request(version: str) -> dict[str, Any]:
    """A one-device request as ``version`` spells it (v1beta1 without ``exactly``)."""
    if version == "v1beta1":
        return {"name": "gpu", "deviceClassName": DRIVER}
    return {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}


async def test_a_claim_of_the_oldest_served_version_is_allocated_prepared_and_released(
    node: Node,
) -> None:
    """v1beta1 on 1.37, v1beta2 on 1.38 (which serves no v1beta1)."""
    api = node.api
    version = api.versions[-1]
    assert version != api.preferred_version
    api.create(
        {
            "apiVersion": f"resource.k8s.io/{version}",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": NS},
            "spec": {"devices": {"requests": [oldest_request(version)]}},
        }
    )
    api.create(pod("infer", {"resourceClaimName": "shared"}))
    ref, _ = await run_pod(node, "infer")

    await delete_pod(node, "infer", ref)

    def released() -> bool:
        claim = api.get("ResourceClaim", "shared", namespace=NS) or {}
        status = claim.get("status", {})
        return not status.get("reservedFor") and not status.get("allocation")

    await eventually(released, "claim no longer reserved nor allocated")

    def unfinalized() -> bool:
        # The driver's finalizer went before the deallocation; the resourceclaim
        # controller drops its delete-protection finalizer in a later update.
        claim = api.get("ResourceClaim", "shared", namespace=NS) or {}
        return not claim.get("metadata", {}).get("finalizers")

    await eventually(unfinalized, "no finalizer left on the claim")
