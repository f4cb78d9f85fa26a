"""Running the stand-in outside the test's loop: a background thread and a process."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

from dralet import kube
from dralet.apiserver import ApiServerThread
from tests.kubeobjects import claim, node

STARTUP_TIMEOUT = 30.0


def test_thread_serves_http_and_store_helpers(tmp_path: Path) -> None:
    with ApiServerThread(kubernetes_version="1.32") as server:
        assert server.url.startswith("http://127.0.0.1:")
        server.create(node("node-a"))
        server.create(claim("c1", "v1beta1"))
        server.patch(
            "ResourceClaim", "c1", {"metadata": {"labels": {"a": "b"}}}, namespace="default"
        )
        with urllib.request.urlopen(f"{server.url}/api/v1/nodes/node-a") as response:
            assert json.load(response)["metadata"]["name"] == "node-a"
        got = server.get("ResourceClaim", "c1", namespace="default")
        assert got is not None and got["metadata"]["labels"] == {"a": "b"}
        assert [n["metadata"]["name"] for n in server.list("Node")] == ["node-a"]
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        assert server.url in kubeconfig.read_text()


async def test_process_prints_its_url_and_writes_a_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    objects = tmp_path / "objects.yaml"
    objects.write_text(json.dumps(node("node-a")))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dralet.apiserver",
        "--kubernetes-version",
        "1.34",
        "--kubeconfig",
        str(kubeconfig),
        str(objects),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        url = (await asyncio.wait_for(process.stdout.readline(), STARTUP_TIMEOUT)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        async with await kube.connect(kubeconfig=kubeconfig) as client:
            assert client.host == url
            assert await kube.negotiate_resource_version(client) == "v1"
            got = await client.get(kube.resources.NODES, "node-a")
            assert got["metadata"]["uid"]
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), STARTUP_TIMEOUT) == 0
