"""The real kube-apiserver behind the API stand-in's store helpers, so one API suite runs
on both backends.

``ClusterApi`` offers the helpers the suites call on ``dralet.apiserver.ApiServer``
(``create``, ``get``, ``list``, ``patch``, ``delete``, ``preferred_version``, ``url``,
``write_kubeconfig``) as the cluster admin, over HTTPS. What only a stand-in can do
(recorded writes, injected failures, compaction on demand) is absent: tests that need it
are marked ``stand_in_only`` and skipped here with that reason.

``driver_kubeconfig`` is the driver's own identity: the ServiceAccount, ClusterRole and
bindings the Helm chart renders, applied as they are, and a TokenRequest token for it, so a
missing or excess permission in deploy/ shows up as a failing test.
"""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.k8scluster import Cluster

DRIVER_NAMESPACE = "dralet"
IDENTITY_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
"""What the chart grants the driver. Its admission policies are applied only by
``tests/k8s/test_admission_policies.py``, which mints the pod-bound token (with the node
name) they require: the other tests' token names no node and would be refused."""


def driver_identity() -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC for a 1.37 cluster, as ``helm template`` renders
    them (the install path operators use)."""
    from tests.deploy.conftest import render_chart

    return [dict(d) for d in render_chart(KUBERNETES_VERSION) if d["kind"] in IDENTITY_KINDS]


def driver_account() -> tuple[str, str]:
    """(namespace, name) of the chart's ServiceAccount."""
    [account] = [d for d in driver_identity() if d["kind"] == "ServiceAccount"]
    return account["metadata"].get("namespace", DRIVER_NAMESPACE), account["metadata"]["name"]


KUBERNETES_VERSION = "1.37"

PROBE_USER_AGENT = "dralet-admission-policy-test"
"""The User-Agent of requests a test makes with the driver's identity, so the audit-log
test of the driver's own requests (tests/k8s/test_rbac.py) can tell them apart."""

# kind -> (group, plural, namespaced); resource.k8s.io kinds take the requested version.
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Node": ("", "nodes", False),
    "Namespace": ("", "namespaces", False),
    "Pod": ("", "pods", True),
    "Event": ("", "events", True),
    "ServiceAccount": ("", "serviceaccounts", True),
    "ResourceClaim": ("resource.k8s.io", "resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io", "resourceclaimtemplates", True),
    "ResourceSlice": ("resource.k8s.io", "resourceslices", False),
    "DeviceClass": ("resource.k8s.io", "deviceclasses", False),
    "DeviceTaintRule": ("resource.k8s.io", "devicetaintrules", False),
    "Workload": ("scheduling.k8s.io", "workloads", True),
    "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings", True),
}
_CORE_VERSIONS = {"": "v1", "rbac.authorization.k8s.io": "v1"}


class ClusterApiError(Exception):
    def __init__(self, code: int, status: Mapping[str, Any]) -> None:
        super().__init__(f"{code} {status.get('reason')}: {status.get('message')}")
        self.code = code
        self.status = dict(status)


class ClusterApi:
    """Admin access to a ``Cluster`` with the stand-in's helper signatures."""

    preferred_version = "v1"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kubernetes_version = cluster.release.minor
        """The cluster's minor version (``1.38``), as the stand-in's settings say theirs."""
        config = cluster.release.runtime_config
        self.versions = tuple(
            v
            for v in ("v1", "v1beta2", "v1beta1")
            if v == self.preferred_version or f"resource.k8s.io/{v}=true" in config
        )
        """The resource.k8s.io versions the stand-in also serves that this cluster serves."""
        self.url = cluster.url
        workdir = cluster.workdir
        self._context = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
        self._context.load_cert_chain(workdir / "admin-client.crt", workdir / "admin-client.key")
        self._namespaces: set[str] = {"default", "dralet"}

    # -- HTTP ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", content_type)
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            raise ClusterApiError(error.code, status) from None
        return json.loads(raw) if raw else {}

    def request_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, context=self._context, timeout=30) as r:
            return str(r.read().decode())

    def wait_for_default_service_account(
        self, namespace: str = "default", within: float = 60.0
    ) -> None:
        """Pods need the ``default`` ServiceAccount the controller-manager makes."""
        deadline = time.monotonic() + within
        while self.get("ServiceAccount", "default", namespace=namespace) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no default ServiceAccount: is kube-controller-manager up?")
            time.sleep(0.1)

    def path(
        self,
        kind: str,
        *,
        name: str | None = None,
        namespace: str | None = None,
        version: str | None = None,
        subresource: str = "",
    ) -> str:
        group, plural, namespaced = _KINDS[kind]
        if group in _CORE_VERSIONS:
            version = _CORE_VERSIONS[group]
        root = f"/apis/{group}/{version or self.preferred_version}" if group else "/api/v1"
        if namespaced and namespace is not None:
            root += f"/namespaces/{namespace}"
        path = f"{root}/{plural}"
        if name is not None:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path

    # -- the stand-in's helpers ----------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        kind = str(obj["kind"])
        version = str(obj.get("apiVersion", "")).rpartition("/")[2]
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        if _KINDS[kind][2]:
            ns = ns or "default"
            self.ensure_namespace(ns)
        return self.request("POST", self.path(kind, namespace=ns, version=version), dict(obj))

    def ensure_namespace(self, name: str) -> None:
        """The stand-in has no Namespace objects; here one is made on first use, once an
        earlier test's namespace of that name has finished terminating."""
        if name in self._namespaces:
            return
        deadline = time.monotonic() + 60
        while (found := self.get("Namespace", name)) is not None:
            if not found["metadata"].get("deletionTimestamp"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name} is still terminating")
            time.sleep(0.2)
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self._namespaces.add(name)

    def note_namespace(self, name: str) -> None:
        """A namespace the test made itself: ``ensure_namespace`` leaves it as it is, and
        ``reset`` removes it."""
        self._namespaces.add(name)

    def get(
        self, kind: str, name: str, *, namespace: str | None = None, version: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.request(
                "GET", self.path(kind, name=name, namespace=namespace, version=version)
            )
        except ClusterApiError as error:
            if error.code == 404:
                return None
            raise

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        version: str | None = None,
    ) -> list[dict[str, Any]]:
        query = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        listed = self.request(
            "GET", self.path(kind, namespace=namespace, version=version), query=query
        )
        api_version = listed.get("apiVersion", "v1")
        items = listed.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
        version: str | None = None,
    ) -> dict[str, Any]:
        return self.request(
            "PATCH",
            self.path(
                kind, name=name, namespace=namespace, version=version, subresource=subresource
            ),
            dict(patch),
            content_type="application/merge-patch+json",
        )

    def delete(self, kind: str, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        return self.request("DELETE", self.path(kind, name=name, namespace=namespace))

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """The admin kubeconfig, copied to ``path``."""
        del namespace
        target = Path(path)
        shutil.copyfile(self.cluster.admin_kubeconfig, target)
        return target

    # -- the driver's identity and clean-up --------------------------------------------------

    def apply_driver_rbac(self) -> None:
        """The chart's namespace, ServiceAccount and RBAC, as ``helm template`` renders them."""
        if self.get("Namespace", DRIVER_NAMESPACE) is None:
            self.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}}
            )
        for obj in driver_identity():
            meta = obj["metadata"]
            if self.get(obj["kind"], meta["name"], namespace=meta.get("namespace")) is None:
                self.create(obj)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bound token for ``namespace/name`` (TokenRequest)."""
        answer = self.request(
            "POST",
            self.path("ServiceAccount", name=name, namespace=namespace, subresource="token"),
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        return str(answer["status"]["token"])

    def driver_kubeconfig(self) -> Path:
        """A kubeconfig that acts as the chart's ServiceAccount."""
        self.apply_driver_rbac()
        namespace, name = driver_account()
        token = self.service_account_token(namespace, name)
        return self.cluster.write_kubeconfig("driver.kubeconfig", user="driver", token=token)

    def reset(self) -> None:
        """Remove what a test made: DRA objects, Nodes, Pods and Events of ``default``."""
        for claim in self.list("ResourceClaim"):
            meta = claim["metadata"]
            if meta.get("finalizers"):
                self.patch(
                    "ResourceClaim",
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                    namespace=meta["namespace"],
                )
        for kind in ("Pod", "ResourceClaim", "ResourceClaimTemplate", "Event"):
            self.request(
                "DELETE", self.path(kind, namespace="default"), query={"gracePeriodSeconds": "0"}
            )
        for namespace in self._namespaces - {"default", "dralet"}:
            self.delete("Namespace", namespace)
        self._namespaces = {"default", "dralet"}
        for kind in ("ResourceSlice", "DeviceClass", "DeviceTaintRule", "Node"):
            self.request("DELETE", self.path(kind))
