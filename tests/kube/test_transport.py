"""Loading the API server's URL, TLS and auth: kubeconfig merging, tokens re-read from
their files, the official loader for the auth only it knows, and client certificates
against the real kube-apiserver."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet import kube
from dralet.kube import access, transport
from tests.k8scluster import Cluster


def _kubeconfig(
    path: Path,
    *,
    current: str = "",
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u}}
            for n, (c, u) in (contexts or {}).items()
        ],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


async def _load(paths: list[Path], context: str | None = None) -> transport.Transport:
    joined = os.pathsep.join(str(p) for p in paths)
    return await transport.load(
        access.ApiAccess(
            kind="kubeconfig", source="--kubeconfig", kubeconfig=joined, context=context
        )
    )


async def test_merged_kubeconfigs_first_file_wins(tmp_path: Path) -> None:
    first = _kubeconfig(
        tmp_path / "a",
        current="ctx",
        clusters={"c": {"server": "http://first:1/"}},
        users={"u": {"token": "first-token"}},
        contexts={"ctx": ("c", "u")},
    )
    second = _kubeconfig(
        tmp_path / "b",
        current="other",
        clusters={"c": {"server": "http://second:2"}, "c2": {"server": "http://third:3"}},
        users={"u": {"token": "second-token"}},
        contexts={"ctx": ("c2", "u"), "other": ("c2", "u")},
    )
    loaded = await _load([first, second])
    assert loaded.host == "http://first:1"
    assert await loaded.auth_headers() == {"Authorization": "Bearer first-token"}
    named = await _load([first, second], context="other")
    assert named.host == "http://third:3"
    with pytest.raises(access.ApiAccessError, match="no context 'missing'"):
        await _load([first], context="missing")


async def test_token_file_is_relative_to_its_kubeconfig_and_reread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "token").write_text("one\n")
    path = _kubeconfig(
        folder / "config",
        current="ctx",
        clusters={"c": {"server": "http://api:6443"}},
        users={"u": {"tokenFile": "token", "token": "inline"}},  # the file wins
        contexts={"ctx": ("c", "u")},
    )
    now = [0.0]
    monkeypatch.setattr(transport.time, "monotonic", lambda: now[0])
    loaded = await _load([path])
    assert await loaded.auth_headers() == {"Authorization": "Bearer one"}
    (folder / "token").write_text("two\n")
    now[0] = transport.TOKEN_REREAD_SECONDS - 1
    assert await loaded.auth_headers() == {"Authorization": "Bearer one"}
    now[0] = transport.TOKEN_REREAD_SECONDS
    assert await loaded.auth_headers() == {"Authorization": "Bearer two"}
    # Mid-rotation the file may be missing a moment: the token read before still serves.
    (folder / "token").unlink()
    now[0] = 3 * transport.TOKEN_REREAD_SECONDS
    assert await loaded.auth_headers() == {"Authorization": "Bearer two"}


async def test_exec_credential_plugin_goes_through_the_official_loader(tmp_path: Path) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    path = _kubeconfig(
        tmp_path / "config",
        current="ctx",
        clusters={"c": {"server": "https://api.example:6443", "insecure-skip-tls-verify": True}},
        users={
            "u": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
                    "interactiveMode": "Never",
                }
            }
        },
        contexts={"ctx": ("c", "u")},
    )
    loaded = await _load([path])
    assert loaded.host == "https://api.example:6443"
    headers = {k.lower(): v for k, v in (await loaded.auth_headers()).items()}
    assert headers["authorization"] == "Bearer from-plugin"


async def test_unusable_access_is_one_access_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "config"
    broken.write_text("clusters: [unclosed")
    with pytest.raises(access.ApiAccessError, match=str(broken)):
        await _load([broken])
    missing_ca = _kubeconfig(
        tmp_path / "ca",
        current="ctx",
        clusters={"c": {"server": "https://api:6443", "certificate-authority": "nope.crt"}},
        users={"u": {}},
        contexts={"ctx": ("c", "u")},
    )
    with pytest.raises(access.ApiAccessError):
        await _load([missing_ca])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(access.ApiAccessError, match="KUBERNETES_SERVICE_HOST"):
        transport.in_cluster(environ={})


@pytest.mark.k8s
async def test_client_certificate_of_a_kubeconfig_on_the_real_server(
    k8s_cluster: Cluster,
) -> None:
    async with await kube.connect(kubeconfig=k8s_cluster.admin_kubeconfig) as client:
        assert client.host == k8s_cluster.url
        namespace = await client.request("GET", "/api/v1/namespaces/default")
        assert namespace["metadata"]["name"] == "default"


def _certificate(folder: Path, name: str) -> tuple[bytes, bytes]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a certificate")
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert.read_bytes(), key.read_bytes()


async def test_inline_client_certificate_is_loaded_and_checked(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "user")
    _, other_key = _certificate(tmp_path, "other")

    def config(key_data: bytes) -> Path:
        return _kubeconfig(
            tmp_path / "config",
            current="ctx",
            clusters={
                "c": {
                    "server": "https://api:6443",
                    "certificate-authority-data": base64.b64encode(cert).decode(),
                }
            },
            users={
                "u": {
                    "client-certificate-data": base64.b64encode(cert).decode(),
                    "client-key-data": base64.b64encode(key_data).decode(),
                }
            },
            contexts={"ctx": ("c", "u")},
        )

    loaded = await _load([config(key)])
    assert loaded.ssl_context is not None
    assert await loaded.auth_headers() == {}
    # A key that is not the certificate's is refused when loaded, not at the first request.
    with pytest.raises(access.ApiAccessError):
        await _load([config(other_key)])
