"""The chart's ValidatingAdmissionPolicies on the real kube-apiserver, with the token a
driver pod really has: bound to a pod on node-a, so the server itself puts the node name
in the request's user. That identity writes node-a's ResourceSlices of its driver and is
refused another node's, another driver's, and everything but its own finalizer on a
ResourceClaim; the same service account without a pod-bound token writes no slice."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.deploy.conftest import render_chart
from tests.k8sapi import (
    KUBERNETES_VERSION,
    PROBE_USER_AGENT,
    ClusterApi,
    ClusterApiError,
    driver_account,
)
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, K8S_TIMEOUT]

DRIVER = "gpu.example.com"
POLICY_KINDS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
POLICY_ROOT = "/apis/admissionregistration.k8s.io/v1"
POLICY_LOADED_WITHIN = 30.0


def policies() -> list[dict[str, Any]]:
    return [dict(d) for d in render_chart(KUBERNETES_VERSION) if d["kind"] in POLICY_KINDS]


class AsToken:
    """Requests to the cluster with a bearer token instead of the admin's certificate."""

    def __init__(self, api: ClusterApi, token: str) -> None:
        self.api = api
        self.token = token
        self.context = ssl.create_default_context(cafile=str(api.cluster.workdir / "ca.crt"))

    def send(self, method: str, path: str, body: Any) -> tuple[int, str]:
        request = urllib.request.Request(
            self.api.url + path, data=json.dumps(body).encode(), method=method
        )
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("User-Agent", PROBE_USER_AGENT)
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def slice_for(node: str, *, driver: str = DRIVER, name: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}-policy-test"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def eventually_refused(attempt: Callable[[], tuple[int, str]]) -> tuple[int, str]:
    """The policies take effect once the server has loaded them: retry until refused."""
    deadline = time.monotonic() + POLICY_LOADED_WITHIN
    while True:
        code, text = attempt()
        if code == 403 or time.monotonic() > deadline:
            return code, text
        time.sleep(0.2)


@pytest.fixture
def policed(k8s_api: ClusterApi) -> Iterator[ClusterApi]:
    """The chart's RBAC and admission policies applied, and two Nodes; all removed after
    (the policies would refuse the other tests' driver tokens, which name no node)."""
    api = k8s_api
    api.apply_driver_rbac()
    made: list[str] = []
    try:
        for node in ("node-a", "node-b"):
            api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        for obj in policies():
            path = f"{POLICY_ROOT}/{POLICY_KINDS[obj['kind']]}"
            api.request("POST", path, obj)
            made.append(f"{path}/{obj['metadata']['name']}")
        yield api
    finally:
        for path in reversed(made):
            api.request("DELETE", path)
        wait_until_unloaded(api)


def wait_until_unloaded(api: ClusterApi) -> None:
    """The server drops deleted policies a moment later: wait until a token naming no
    node writes a slice again, so the next test's driver is not refused."""
    namespace, account = driver_account()
    plain = AsToken(api, api.service_account_token(namespace, account))
    probe = slice_for("node-a", name="policy-unload-probe")
    deadline = time.monotonic() + POLICY_LOADED_WITHIN
    while True:
        code, text = plain.send("POST", SLICES, probe)
        if code in (201, 409) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if api.get("ResourceSlice", "policy-unload-probe") is not None:
        api.delete("ResourceSlice", "policy-unload-probe")
    assert code in (201, 409), f"the admission policies stayed in force: {text}"


def pod_bound_token(api: ClusterApi, node: str, pod_name: str) -> str:
    """The token a driver pod on ``node`` gets: bound to that pod."""
    namespace, account = driver_account()
    pod = api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace},
            "spec": {
                "serviceAccountName": account,
                "nodeName": node,
                "containers": [{"name": "driver", "image": "dralet:test"}],
            },
        }
    )
    answer = api.request(
        "POST",
        api.path("ServiceAccount", name=account, namespace=namespace, subresource="token"),
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    return str(answer["status"]["token"])


SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def remove_pods(api: ClusterApi, namespace: str) -> None:
    """At once: no kubelet runs here to confirm a graceful deletion."""
    api.request("DELETE", api.path("Pod", namespace=namespace), query={"gracePeriodSeconds": "0"})


def test_a_driver_pod_writes_its_own_nodes_slices_only(policed: ClusterApi) -> None:
    api = policed
    namespace, _ = driver_account()
    try:
        driver = AsToken(api, pod_bound_token(api, "node-a", "slice-writer"))

        code, text = eventually_refused(lambda: driver.send("POST", SLICES, slice_for("node-b")))
        assert code == 403, text
        assert "node-a may write ResourceSlices of node node-a only" in text

        code, text = driver.send("POST", SLICES, slice_for("node-a", driver="other.example.com"))
        assert code == 403, text
        assert f"ResourceSlices of driver {DRIVER} only" in text

        code, text = driver.send("POST", SLICES, slice_for("node-a"))
        assert code == 201, text
        name = json.loads(text)["metadata"]["name"]
        moved = {"spec": {"nodeName": "node-b"}}
        code, text = driver.send("PATCH", f"{SLICES}/{name}", moved)
        assert code in (403, 422), text  # refused by the policy (or nodeName is immutable)
        code, text = driver.send("DELETE", f"{SLICES}/{name}", {})
        assert code == 200, text

        # Another node's slice, made by an admin, is not the node-a pod's to delete.
        api.create(slice_for("node-b", name="node-b-by-admin"))
        code, text = driver.send("DELETE", f"{SLICES}/node-b-by-admin", {})
        assert code == 403, text
    finally:
        for name in ("node-b-by-admin",):
            if api.get("ResourceSlice", name) is not None:
                api.delete("ResourceSlice", name)
        remove_pods(api, namespace)


def test_a_token_that_names_no_node_writes_no_slice(policed: ClusterApi) -> None:
    api = policed
    namespace, account = driver_account()
    plain = AsToken(api, api.service_account_token(namespace, account))
    code, text = eventually_refused(lambda: plain.send("POST", SLICES, slice_for("node-a")))
    assert code == 403, text
    assert "names no node" in text


def test_the_driver_changes_only_its_own_finalizer_on_a_claim(policed: ClusterApi) -> None:
    api = policed
    namespace, _ = driver_account()
    claim = api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "policy-test", "namespace": "default", "finalizers": ["x/y"]},
            "spec": {"devices": {"requests": []}},
        }
    )
    path = api.path("ResourceClaim", name="policy-test", namespace="default")
    try:
        driver = AsToken(api, pod_bound_token(api, "node-a", "claim-patcher"))

        def patch(metadata: dict[str, Any]) -> tuple[int, str]:
            return driver.send("PATCH", path, {"metadata": metadata})

        attempts = iter(range(1_000_000))  # each try a new change: a no-op is never refused
        code, text = eventually_refused(
            lambda: patch({"labels": {"owned": f"try-{next(attempts)}"}})
        )
        assert code == 403, text
        code, text = patch({"finalizers": []})  # another's finalizer
        assert code == 403, text
        code, text = patch({"finalizers": ["x/y", f"{DRIVER}/prepared"]})
        assert code == 200, text
        code, text = patch({"finalizers": ["x/y"]})
        assert code == 200, text
        assert claim["metadata"]["finalizers"] == ["x/y"]
    finally:
        try:
            api.patch(
                "ResourceClaim",
                "policy-test",
                {"metadata": {"finalizers": None}},
                namespace="default",
            )
            api.delete("ResourceClaim", "policy-test", namespace="default")
        except ClusterApiError:
            pass
        remove_pods(api, namespace)
