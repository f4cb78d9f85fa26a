"""CPU per request and resident memory of the ways to call the API server from Python.

Against the real kube-apiserver of ``make k8s`` (etcd + kube-apiserver), one claim read and
its finalizer added and removed by strategic-merge patch, sequentially, by:

- ``official call_api``: the official client's ``ApiClient.param_serialize`` and
  ``call_api``, raw JSON in and out (no models), as ``dralet.kube`` did before;
- ``dralet.kube``: ``KubeClient`` (one aiohttp session, auth loaded once);
- ``bare aiohttp``: a session with the admin's certificate and nothing else;
- ``httpcore (h11)``: httpcore's connection pool over h11, pure Python, the other async
  HTTP/1.1 client with a small footprint (left out when httpcore is not installed).

CPU is this process's (user + system) per request; the memory column is the resident
memory a fresh interpreter that imported ssl and asyncio gains by importing what each
one needs.

    .venv/bin/python benchmarks/bench_client.py [--requests 600]

It prints a table; without the control plane's binaries it says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import k8scluster  # noqa: E402

from dralet import kube  # noqa: E402

NAMESPACE = "default"
CLAIM = "bench-client"
FINALIZER = "gpu.example.com/prepared"
PATH = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{CLAIM}"
STRATEGIC = "application/strategic-merge-patch+json"
IMPORTS = {
    "official call_api": "import aiohttp, kubernetes.aio.client, kubernetes.aio.config",
    "dralet.kube": "import dralet.kube.client",
    "bare aiohttp": "import aiohttp",
    "httpcore (h11)": "import httpcore; httpcore.AsyncConnectionPool()",
}

Call = Callable[[str, str, Any, str], Awaitable[bytes]]


def rss_gain(statement: str) -> float:
    """MiB of resident memory ``statement`` adds to an interpreter that imported ssl and
    asyncio (what any client here needs)."""
    probe = (
        "import asyncio, ssl\n"
        "def rss():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmRSS:'):\n"
        "            return int(line.split()[1])\n"
        "before = rss()\n"
        f"{statement}\n"
        "print((rss() - before) / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def admin_ssl(cluster: k8scluster.Cluster) -> ssl.SSLContext:
    config = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    user = config["users"][0]["user"]
    context = ssl.create_default_context(
        cafile=config["clusters"][0]["cluster"]["certificate-authority"]
    )
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    return context


async def official(cluster: k8scluster.Cluster) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from kubernetes.aio import config as official_config
    from kubernetes.aio.client import ApiClient, Configuration

    configuration: Any = Configuration()
    loader: Any = official_config
    await loader.load_kube_config(
        config_file=str(cluster.admin_kubeconfig), client_configuration=configuration
    )
    api = ApiClient(configuration)

    async def call(method: str, path: str, body: Any, content_type: str) -> bytes:
        serialized = await api.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        method_, url, headers, body_, _ = serialized
        response = await api.call_api(method_, url, header_params=headers, body=body_)
        data: bytes = await response.response.read()
        response.response.release()
        json.loads(data)
        return data

    async def close() -> None:
        await api.close()

    return call, close


async def dralet_client(
    cluster: k8scluster.Cluster,
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    client = await kube.connect(kubeconfig=cluster.admin_kubeconfig)

    async def call(method: str, path: str, body: Any, content_type: str) -> bytes:
        await client.request(method, path, body=body, content_type=content_type)
        return b""

    return call, client.close


async def bare(cluster: k8scluster.Cluster) -> tuple[Call, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=admin_ssl(cluster)))

    async def call(method: str, path: str, body: Any, content_type: str) -> bytes:
        async with session.request(
            method,
            cluster.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        ) as response:
            data = await response.read()
            json.loads(data)
            return data

    return call, session.close


async def pure_python(cluster: k8scluster.Cluster) -> tuple[Call, Callable[[], Awaitable[None]]]:
    import httpcore

    pool = httpcore.AsyncConnectionPool(ssl_context=admin_ssl(cluster))

    async def call(method: str, path: str, body: Any, content_type: str) -> bytes:
        response = await pool.request(
            method,
            cluster.url + path,
            headers=[("Content-Type", content_type), ("Accept", "application/json")],
            content=json.dumps(body).encode() if body is not None else b"",
        )
        json.loads(response.content)
        return response.content

    return call, pool.aclose


def httpcore_installed() -> bool:
    try:
        import httpcore  # noqa: F401
    except ImportError:
        return False
    return True


async def measure(call: Call, requests: int) -> float:
    add = {"metadata": {"finalizers": [FINALIZER]}}
    remove = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
    for _ in range(10):  # warm: connections, caches
        await call("GET", PATH, None, "application/json")
    rounds = requests // 3
    start = time.process_time()
    for _ in range(rounds):
        await call("GET", PATH, None, "application/json")
        await call("PATCH", PATH, add, STRATEGIC)
        await call("PATCH", PATH, remove, STRATEGIC)
    return (time.process_time() - start) / (rounds * 3)


async def run(cluster: k8scluster.Cluster, requests: int) -> None:
    setup = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=admin_ssl(cluster)))
    async with setup.post(
        cluster.url + PATH.rpartition("/")[0],
        json={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": CLAIM},
            "spec": {"devices": {"requests": []}},
        },
    ) as response:
        assert response.status == 201, await response.text()
    await setup.close()
    rows = []
    clients: list[tuple[str, Callable[[k8scluster.Cluster], Awaitable[tuple[Call, Any]]]]] = [
        ("official call_api", official),
        ("dralet.kube", dralet_client),
        ("bare aiohttp", bare),
    ]
    if httpcore_installed():
        clients.append(("httpcore (h11)", pure_python))
    else:
        print("(httpcore is not installed: its row is left out)")
    for name, make in clients:
        call, close = await make(cluster)
        try:
            cpu = await measure(call, requests)
        finally:
            await close()
        rows.append((name, f"{cpu * 1e6:,.0f} µs", f"{rss_gain(IMPORTS[name]):.1f} MiB"))
    print(f"\n{requests} requests each (GET, PATCH, PATCH), sequential, {cluster.release}\n")
    header = ("client", "CPU per request", "RSS of its imports")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for index, row in enumerate([header, *rows]):
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if index == 0:
            print("-+-".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    args = parser.parse_args()
    release = k8scluster.default_release()
    missing = k8scluster.missing_binaries(release)
    if missing:
        print(f"skipped: {missing}")
        return
    cluster = k8scluster.Cluster(release, components=("etcd", "kube-apiserver"))
    try:
        cluster.start()
        asyncio.run(run(cluster, args.requests))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
