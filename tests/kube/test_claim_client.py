"""ClaimClient against the stand-in and the real kube-apiserver: the ClaimSource contract
the ledger relies on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dralet import kube
from dralet.apiserver import ApiServer
from dralet.kube import transport
from dralet.node import claims
from tests.kubeobjects import allocation, claim, ready_status

FINALIZER = claims.finalizer_name("gpu.example.com")


async def _claim(apiserver: ApiServer, name: str = "c1") -> dict[str, Any]:
    return apiserver.create(claim(name, apiserver.preferred_version))


def _finalizers(apiserver: ApiServer, name: str = "c1") -> list[str]:
    stored = apiserver.get("ResourceClaim", name, namespace="default")
    assert stored is not None
    return list(stored["metadata"].get("finalizers") or [])


def _resource_version(apiserver: ApiServer, name: str = "c1") -> str:
    stored = apiserver.get("ResourceClaim", name, namespace="default")
    assert stored is not None
    return str(stored["metadata"]["resourceVersion"])


async def test_is_a_claim_source(client: kube.KubeClient) -> None:
    source: claims.ClaimSource = kube.ClaimClient(client)
    assert await source.get_claim("default", "missing") is None


async def test_get_claim_reads_the_negotiated_version(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    created = await _claim(apiserver)
    apiserver.patch(
        "ResourceClaim",
        "c1",
        {"status": allocation(driver="gpu.example.com", pool="node-a", device="gpu-0")},
        namespace="default",
        subresource="status",
    )
    got = await kube.ClaimClient(client).get_claim("default", "c1")
    assert got is not None
    assert got["apiVersion"] == f"resource.k8s.io/{apiserver.preferred_version}"
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    requests = got["spec"]["devices"]["requests"]
    if apiserver.preferred_version == "v1beta1":
        assert requests[0]["deviceClassName"] == "gpu.example.com"
    else:
        assert requests[0]["exactly"]["deviceClassName"] == "gpu.example.com"


async def test_add_and_remove_finalizer(apiserver: ApiServer, client: kube.KubeClient) -> None:
    uid = (await _claim(apiserver))["metadata"]["uid"]
    source = kube.ClaimClient(client)
    assert await source.add_finalizer("default", "c1", uid, FINALIZER) is True
    assert _finalizers(apiserver) == [FINALIZER]
    version = _resource_version(apiserver)
    assert await source.add_finalizer("default", "c1", uid, FINALIZER) is True
    assert _resource_version(apiserver) == version, "adding a present finalizer writes nothing"
    assert await source.remove_finalizer("default", "c1", uid, FINALIZER) is True
    assert _finalizers(apiserver) == []
    assert _resource_version(apiserver) != version


async def test_finalizer_patches_keep_other_writers_entries_and_read_nothing(
    apiserver: ApiServer, client: kube.KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The add and the removal are one PATCH each, with no read before it and no
    resourceVersion precondition: a finalizer another writer added meanwhile stays."""
    uid = (await _claim(apiserver))["metadata"]["uid"]
    source = kube.ClaimClient(client)
    await source.api_version()
    sent: list[str] = []
    real_request = client.request

    async def counting_request(method: str, path: str, **kwargs: Any) -> Any:
        sent.append(method)
        return await real_request(method, path, **kwargs)

    monkeypatch.setattr(client, "request", counting_request)
    assert await source.add_finalizer("default", "c1", uid, FINALIZER) is True
    apiserver.patch(
        "ResourceClaim",
        "c1",
        {"metadata": {"finalizers": [FINALIZER, "other.example.com/keep"]}},
        namespace="default",
    )
    assert await source.remove_finalizer("default", "c1", uid, FINALIZER) is True
    assert _finalizers(apiserver) == ["other.example.com/keep"]
    assert await source.add_finalizer("default", "c1", uid, FINALIZER) is True
    assert sorted(_finalizers(apiserver)) == sorted(["other.example.com/keep", FINALIZER])
    assert sent == ["PATCH", "PATCH", "PATCH"]


async def test_other_uid_means_gone(apiserver: ApiServer, client: kube.KubeClient) -> None:
    await _claim(apiserver)
    source = kube.ClaimClient(client)
    assert await source.add_finalizer("default", "c1", "another-uid", FINALIZER) is False
    assert _finalizers(apiserver) == []
    assert await source.remove_finalizer("default", "c1", "another-uid", FINALIZER) is True
    assert await source.add_finalizer("default", "missing", "u", FINALIZER) is False
    assert await source.remove_finalizer("default", "missing", "u", FINALIZER) is True


async def test_deleted_claim_is_held_by_the_finalizer(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    uid = (await _claim(apiserver))["metadata"]["uid"]
    source = kube.ClaimClient(client)
    assert await source.add_finalizer("default", "c1", uid, FINALIZER)
    apiserver.delete("ResourceClaim", "c1", namespace="default")  # a user deletes it
    held = await source.get_claim("default", "c1")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    # A claim being deleted takes no new finalizer (the server forbids it too).
    assert await source.add_finalizer("default", "c1", uid, "other.example.com/x") is False
    assert await source.remove_finalizer("default", "c1", uid, FINALIZER) is True
    assert await source.get_claim("default", "c1") is None


async def test_inventory_lists_claims_slices_and_classes(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    """The tools' view (audit, simulate), with the user's kubeconfig, not the driver's."""
    v = apiserver.preferred_version
    apiserver.create(claim("c1", v, namespace="ns1"))
    apiserver.create(
        {
            "apiVersion": f"resource.k8s.io/{v}",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {},
        }
    )
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    async with await kube.connect(kubeconfig=kubeconfig) as client:
        inventory = await kube.read_inventory(client)
        assert inventory.api_version == v
        assert [c["metadata"]["name"] for c in inventory.claims] == ["c1"]
        assert inventory.claims[0]["apiVersion"] == f"resource.k8s.io/{v}"
        assert [c["kind"] for c in inventory.device_classes] == ["DeviceClass"]
        assert inventory.slices == ()
        found = await kube.list_resource_slices(client, node_name="node-a", driver="x.example.com")
        assert found == []


async def test_connect_through_a_kubeconfig(apiserver: ApiServer, tmp_path: Path) -> None:
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    async with await kube.connect(kubeconfig=path) as client:
        assert client.host == apiserver.url
        assert await kube.ClaimClient(client).get_claim("default", "none") is None


@pytest.fixture
def ca_certificate(tmp_path: Path) -> Path:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a CA certificate")
    ca = tmp_path / "ca.crt"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            str(tmp_path / "ca.key"),
            "-out",
            str(ca),
        ],
        check=True,
        capture_output=True,
    )
    return ca


async def test_connect_in_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ca_certificate: Path
) -> None:
    """The service-account path: host from the environment, token and CA from files."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("service-account-token\n")
    shutil.copy(ca_certificate, account / "ca.crt")
    monkeypatch.setattr(transport, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    async with await kube.connect(in_cluster=True) as client:
        assert client.host == "https://127.0.0.1:6443"
        headers = await client.transport.auth_headers()
        assert headers == {"Authorization": "Bearer service-account-token"}


async def test_adding_the_finalizer_to_a_claim_just_read_reads_it_no_more(
    apiserver: ApiServer, client: kube.KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _claim(apiserver)
    source = kube.ClaimClient(client)
    current = await source.get_claim("default", "c1")
    reads: list[str] = []
    real_get = client.get

    async def counting_get(*args: Any, **kwargs: Any) -> Any:
        reads.append(str(args[1]))
        return await real_get(*args, **kwargs)

    monkeypatch.setattr(client, "get", counting_get)
    created_uid = current["metadata"]["uid"] if current else ""
    assert await source.add_finalizer("default", "c1", created_uid, FINALIZER, current=current)
    assert reads == []  # the prepare's one read served the patch's precondition too
    assert _finalizers(apiserver) == [FINALIZER]

    # A claim that changed since it was read is patched all the same, still unread.
    apiserver.patch(
        "ResourceClaim", "c1", {"metadata": {"labels": {"x": "y"}}}, namespace="default"
    )
    stale = dict(current or {})
    assert await source.add_finalizer("default", "c1", created_uid, "other/f", current=stale)
    assert reads == []
    assert sorted(_finalizers(apiserver)) == sorted([FINALIZER, "other/f"])


@pytest.mark.stand_in_only(
    "the chart's identity needs deviceStatus RBAC and a node-bound token: "
    "tests/k8s/test_device_status.py checks it on the real server"
)
async def test_device_status_apply_keeps_other_drivers_entries(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    uid = (await _claim(apiserver))["metadata"]["uid"]
    status = allocation(driver="gpu.example.com", pool="node-a", device="gpu-0")
    status["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": "net.example.com", "pool": "node-a", "device": "nic-0"}
    )
    apiserver.patch(
        "ResourceClaim", "c1", {"status": status}, namespace="default", subresource="status"
    )
    gpu = kube.ClaimClient(client)
    assert await gpu.apply_device_status(
        "default",
        "c1",
        uid,
        "net.example.com",
        [ready_status("net.example.com", "node-a", "nic-0")],
    )
    assert await gpu.apply_device_status(
        "default",
        "c1",
        uid,
        "gpu.example.com",
        [ready_status("gpu.example.com", "node-a", "gpu-0")],
    )

    def entries() -> list[tuple[str, str]]:
        stored = apiserver.get("ResourceClaim", "c1", namespace="default")
        assert stored is not None
        return [(d["driver"], d["device"]) for d in stored["status"].get("devices", [])]

    assert entries() == [("net.example.com", "nic-0"), ("gpu.example.com", "gpu-0")]
    assert await gpu.apply_device_status("default", "c1", uid, "gpu.example.com", [])
    assert entries() == [("net.example.com", "nic-0")]
    with pytest.raises(kube.ApiError, match="must be an allocated device"):
        await gpu.apply_device_status(
            "default",
            "c1",
            uid,
            "gpu.example.com",
            [ready_status("gpu.example.com", "node-a", "gpu-9")],
        )
    assert not await gpu.apply_device_status("default", "c1", "another-uid", "gpu.example.com", [])
    assert not await gpu.apply_device_status("default", "gone", uid, "gpu.example.com", [])
