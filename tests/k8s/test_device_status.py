"""The claim device status writer on the real kube-apiserver of each release CI builds, with
the chart's ``deviceStatus.write`` RBAC and admission policy and the token a driver pod on
node-a really has: ``ClaimClient.apply_device_status`` (what the engine calls after a
prepare and before its finalizer goes) writes and removes the driver's entries of a claim
allocated on node-a and leaves another driver's alone; the server itself refuses the pod on
node-b (``associated-node:patch`` on ``resourceclaims/driver``, 1.36+) and a token naming no
node, and the policy refuses any other change of the status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dralet import kube
from tests.deploy.conftest import render_chart
from tests.k8s.test_admission_policies import (
    POLICY_KINDS,
    POLICY_ROOT,
    AsToken,
    pod_bound_token,
    remove_pods,
    wait_until_unloaded,
)
from tests.k8sapi import KUBERNETES_VERSION, ClusterApi, driver_account, driver_identity
from tests.kubefixtures import K8S_TIMEOUT
from tests.kubeobjects import ready_status

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, K8S_TIMEOUT]

DRIVER = "gpu.example.com"
OTHER = "net.example.com"
STATUS_VALUES = (("deviceStatus.write", "true"),)


def chart_with_status() -> tuple[dict[str, Any], ...]:
    return tuple(dict(d) for d in render_chart(KUBERNETES_VERSION, STATUS_VALUES))


def cluster_role(chart: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (role,) = [d for d in chart if d["kind"] == "ClusterRole"]
    return role


@pytest.fixture
def status_writer(k8s_api: ClusterApi) -> Iterator[ClusterApi]:
    """The chart's identity with the deviceStatus RBAC, its admission policies, and Nodes
    node-a and node-b; the default chart's role is put back after."""
    api = k8s_api
    api.apply_driver_rbac()
    chart = chart_with_status()
    role = cluster_role(chart)
    path = api.path("ClusterRole", name=role["metadata"]["name"])
    api.request("PUT", path, role)
    made: list[str] = []
    try:
        for node in ("node-a", "node-b"):
            api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        for obj in chart:
            if obj["kind"] in POLICY_KINDS:
                where = f"{POLICY_ROOT}/{POLICY_KINDS[obj['kind']]}"
                api.request("POST", where, obj)
                made.append(f"{where}/{obj['metadata']['name']}")
        yield api
    finally:
        for where in reversed(made):
            api.request("DELETE", where)
        (default_role,) = [d for d in driver_identity() if d["kind"] == "ClusterRole"]
        api.request("PUT", path, default_role)
        wait_until_unloaded(api)


def assert_policy_type_checks(api: ClusterApi, suffix: str) -> None:
    """The server type-checks a policy's CEL against the resource's schema once loaded:
    no expression of the chart's policy may draw a warning."""
    deadline = time.monotonic() + 30
    while True:
        policies = api.request("GET", f"{POLICY_ROOT}/validatingadmissionpolicies")["items"]
        (policy,) = [p for p in policies if p["metadata"]["name"].endswith(suffix)]
        checked = (policy.get("status") or {}).get("typeChecking")
        if checked is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert checked is not None, "the server never type-checked the policy"
    assert not checked.get("expressionWarnings"), checked


def allocated_on(api: ClusterApi, node: str, name: str) -> dict[str, Any]:
    """A claim allocated (by the admin, as the scheduler would) to devices of two
    drivers on ``node``."""
    claim = api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": DRIVER}},
                        {"name": "nic", "exactly": {"deviceClassName": OTHER}},
                    ]
                }
            },
        }
    )
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    results = [
        {"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"},
        {"request": "nic", "driver": OTHER, "pool": node, "device": "nic-0"},
    ]
    status = {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}
    api.patch("ResourceClaim", name, {"status": status}, namespace="default", subresource="status")
    api.patch(
        "ResourceClaim",
        name,
        {"status": {"devices": [ready_status(OTHER, node, "nic-0")]}},
        namespace="default",
        subresource="status",
    )
    return claim


def status_entries(api: ClusterApi, name: str) -> list[tuple[str, str]]:
    claim = api.get("ResourceClaim", name, namespace="default")
    assert claim is not None
    return [(d["driver"], d["device"]) for d in claim.get("status", {}).get("devices", [])]


async def as_driver_on(api: ClusterApi, node: str, pod: str) -> kube.KubeClient:
    token = pod_bound_token(api, node, pod)
    kubeconfig = api.cluster.write_kubeconfig(f"{pod}.kubeconfig", user=pod, token=token)
    return await kube.connect(kubeconfig=kubeconfig)


async def test_the_driver_pod_writes_and_removes_its_devices_status_only(
    status_writer: ClusterApi,
) -> None:
    api = status_writer
    namespace, account = driver_account()
    claim = allocated_on(api, "node-a", "status-a")
    uid = claim["metadata"]["uid"]
    try:
        async with await as_driver_on(api, "node-a", "status-writer-a") as client:
            claims = kube.ClaimClient(client)
            assert await claims.apply_device_status(
                "default", "status-a", uid, DRIVER, [ready_status(DRIVER, "node-a", "gpu-0")]
            )
            assert status_entries(api, "status-a") == [(OTHER, "nic-0"), (DRIVER, "gpu-0")]
            assert await claims.apply_device_status("default", "status-a", uid, DRIVER, [])
            assert status_entries(api, "status-a") == [(OTHER, "nic-0")]
            assert not await claims.apply_device_status(
                "default", "status-a", "00000000-0000-0000-0000-000000000000", DRIVER, []
            )

        # Another driver's entry: the server asks for resourceclaims/driver of that driver
        # and answers 422 (a FieldValueForbidden cause on status.devices), not 403.
        writer_a = AsToken(api, pod_bound_token(api, "node-a", "status-raw-a"))
        path = api.path("ResourceClaim", name="status-a", namespace="default", subresource="status")
        code, text = writer_a.send("PATCH", path, {"status": {"devices": []}})
        assert code == 422, text
        assert f'resourceclaims.resource.k8s.io \\"{OTHER}\\" is forbidden' in text

        # Allocation and reservedFor are the scheduler's: the server asks for
        # resourceclaims/binding (1.36+; the chart's status policy guards older servers).
        code, text = writer_a.send(
            "PATCH",
            path,
            {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}},
        )
        assert code == 422, text
        assert "resourceclaims/binding" in text
        assert_policy_type_checks(api, "resourceclaim-status")

        # The pod on node-b is refused node-a's claim by the server (associated-node).
        writer_b = AsToken(api, pod_bound_token(api, "node-b", "status-raw-b"))
        mine = ready_status(DRIVER, "node-a", "gpu-0")
        other = ready_status(OTHER, "node-a", "nic-0")
        code, text = writer_b.send("PATCH", path, {"status": {"devices": [other, mine]}})
        assert code == 422, text
        assert "cannot arbitrary-node:patch" in text

        # A token naming no node holds no associated-node verb at all.
        plain = AsToken(api, api.service_account_token(namespace, account))
        code, text = plain.send("PATCH", path, {"status": {"devices": [other, mine]}})
        assert code == 422, text
        assert "cannot arbitrary-node:patch" in text
        assert status_entries(api, "status-a") == [(OTHER, "nic-0")]
    finally:
        api.delete("ResourceClaim", "status-a", namespace="default")
        remove_pods(api, namespace)
