"""The chart's RBAC grants exactly the API calls a real ``dralet run`` makes.

A driver process runs against the API stand-in through its whole life: it publishes
(creating its slice, deleting a stale pool's, patching its own back after a drift,
listing and watching them), prepares and
unprepares a claim (reading it, patching its finalizer), and reports a corrupt
checkpoint with a Node Event. Every HTTP request is recorded and turned into the
(verb, group, resource, namespace) an API server's authorizer would check; each must
be allowed by the rendered ClusterRole/Role, and each granted verb must have been used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests import claimstore

from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kube.events import EVENT_NAMESPACE
from dralet.kubelet import KubeletEmulator

pytestmark = pytest.mark.e2e

Document = dict[str, Any]
Render = Callable[..., tuple[Document, ...]]
Access = tuple[str, str, str, str]
"""(verb, API group, resource, namespace or "" for cluster scope)."""
DRIVER = "gpu.example.com"
NODE = "node-a"
WAIT_S = 30.0
RS = ("resource.k8s.io", "resourceslices", "")


def access_of(method: str, path: str, query: dict[str, str]) -> Access | None:
    """What the authorizer checks for one request; None for discovery (any user)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = {
        "GET": "get" if named else ("watch" if query.get("watch") in {"1", "true"} else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[method]
    return verb, group, resource, namespace


def granted(documents: tuple[Document, ...]) -> set[Access]:
    out: set[Access] = set()
    for document in documents:
        if document["kind"] not in {"ClusterRole", "Role"}:
            continue
        namespace = document["metadata"].get("namespace", "")
        for rule in document["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out |= {(verb, group, resource, namespace) for verb in rule["verbs"]}
    return out


def allowed(access: Access, grants: set[Access]) -> bool:
    verb, group, resource, namespace = access
    return (verb, group, resource, "") in grants or (
        namespace != "" and (verb, group, resource, namespace) in grants
    )


def slice_object(name: str, pool: str, device: str) -> Document:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": device}],
        },
    }


async def until(condition: Callable[[], bool], driver: DriverProcess) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, driver.log()
        await asyncio.sleep(0.05)


async def test_rbac_allows_every_call_of_the_driver_and_no_more(
    render: Render, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: set[Access] = set()
    api = ApiServer(kubernetes_version="1.34")
    handle = api._handle

    async def recording(request: web.Request) -> web.StreamResponse:
        access = access_of(request.method, request.path, dict(request.query))
        if access is not None:
            seen.add(access)
        return await handle(request)

    monkeypatch.setattr(api, "_handle", recording)
    async with api:
        cluster = ControlPlane(api)
        cluster.add_node()
        api.create(slice_object("stale-pool", "old-pool", "gpu-9"))  # to delete
        paths = DriverPaths(short_tmp)
        driver = DriverProcess(
            driver_args(paths, api_url=api.url), log_path=short_tmp / "driver.log"
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        try:
            driver.start()
            plugin = await kubelet.wait_for_plugin(DRIVER)

            def published() -> bool:
                live = cluster.slices()
                return len(live) == 1 and len(live[0]["spec"]["devices"]) == 4

            await until(published, driver)  # created, the stale pool deleted
            (own,) = cluster.slices()
            drift = {"spec": {"devices": own["spec"]["devices"][:1]}}
            api.patch("ResourceSlice", own["metadata"]["name"], drift)
            await until(published, driver)  # repaired in place
            ref = cluster.allocate_claim("held", [("gpu", "gpu-0")])
            assert (await plugin.prepare([ref])).kubelet_error == ""
            assert (await plugin.unprepare([ref])).kubelet_error == ""
            assert (await plugin.prepare([ref])).kubelet_error == ""
            await driver.terminate()
            await kubelet.close()
            claimstore.damage_store(paths.store)
            driver.start()
            await kubelet.wait_for_plugin(DRIVER)
            await until(lambda: bool(api.list("Event", namespace=EVENT_NAMESPACE)), driver)
        finally:
            await kubelet.close()
            await driver.terminate()

    grants = granted(render("1.34"))
    assert {a for a in seen if not allowed(a, grants)} == set()
    used = {(verb, group, resource) for verb, group, resource, _ in seen}
    assert {(verb, group, resource) for verb, group, resource, _ in grants} == used


def test_the_request_mapping() -> None:
    cases: list[tuple[str, str, dict[str, str], Access | None]] = [
        ("GET", "/apis/resource.k8s.io", {}, None),
        ("GET", "/api/v1/nodes/node-a", {}, ("get", "", "nodes", "")),
        ("GET", "/apis/resource.k8s.io/v1/resourceslices", {}, ("list", *RS)),
        ("GET", "/apis/resource.k8s.io/v1/resourceslices", {"watch": "true"}, ("watch", *RS)),
        ("DELETE", "/apis/resource.k8s.io/v1/resourceslices", {}, ("deletecollection", *RS)),
        ("POST", "/api/v1/namespaces/default/events", {}, ("create", "", "events", "default")),
        (
            "PATCH",
            "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status",
            {},
            ("patch", "resource.k8s.io", "resourceclaims/status", "ns"),
        ),
    ]
    for method, path, query, expected in cases:
        assert access_of(method, path, query) == expected, path
