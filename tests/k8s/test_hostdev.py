"""hostdev on real Kubernetes (each release CI builds): the API server accepts what it
publishes (a shared device with consumable capacity, an exclusive one), kube-scheduler
allocates the shared device to two claims (each with its shareID) and the exclusive one to
one pod only, and the driver prepares what was allocated."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dralet import kube
from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletClaim, KubeletEmulator, NodeHeartbeat, PluginConnection
from tests.hostdev.fakehost import FakeHost
from tests.k8s.drivernode import NODE, eventually
from tests.k8sapi import ClusterApi
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, pytest.mark.e2e, K8S_TIMEOUT]

DRIVER = "hostdev.example.com"
NS = "default"
GROUPS = ("excl", "shared")


@dataclass
class HostdevNode:
    api: ClusterApi
    driver: DriverProcess
    plugin: PluginConnection


@pytest.fixture
async def hostdev_node(
    k8s_api: ClusterApi, short_tmp: Path, tmp_path: Path
) -> AsyncIterator[HostdevNode]:
    host = FakeHost(tmp_path / "host")
    host.node("excl0", (1, 3))
    host.node("shared0", (1, 5))
    config = tmp_path / "hostdev.yaml"
    config.write_text(
        host.config(
            f"  - name: excl\n    match: {{paths: ['{host.dev}/excl*']}}\n    naming: [path]\n"
            f"  - name: shared\n    match: {{paths: ['{host.dev}/shared*']}}\n"
            "    naming: [path]\n    share: 2\n"
        )
    )
    async with await kube.connect(kubeconfig=k8s_api.cluster.admin_kubeconfig) as admin:
        heartbeat = asyncio.create_task(NodeHeartbeat(admin, NODE).run())
        paths = DriverPaths(short_tmp, driver_name=DRIVER, node_name=NODE)
        driver = DriverProcess(
            driver_args(
                paths,
                api_url=None,
                driver="hostdev",
                driver_config=config,
                extra=["--kubeconfig", str(k8s_api.driver_kubeconfig())],
            ),
            log_path=short_tmp / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version=k8s_api.kubernetes_version)
        try:
            await eventually(lambda: k8s_api.get("Node", NODE), "node registered")
            for group in GROUPS:
                expression = (
                    f'device.driver == "{DRIVER}" && '
                    f'device.attributes["{DRIVER}"].group == "{group}"'
                )
                k8s_api.create(
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "DeviceClass",
                        "metadata": {"name": f"{group}.{DRIVER}"},
                        "spec": {"selectors": [{"cel": {"expression": expression}}]},
                    }
                )
            driver.start()
            plugin = await kubelet.wait_for_plugin(DRIVER)
            await eventually(
                lambda: k8s_api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}"),
                "the driver's ResourceSlice",
            )
            k8s_api.wait_for_default_service_account()
            yield HostdevNode(k8s_api, driver, plugin)
        finally:
            await kubelet.close()
            await driver.terminate()
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)


def _template(api: ClusterApi, group: str) -> None:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": group, "namespace": NS},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "dev", "exactly": {"deviceClassName": f"{group}.{DRIVER}"}}
                        ]
                    }
                }
            },
        }
    )


def _pod(api: ClusterApi, name: str, template: str) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "dev"}]}}
                ],
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            },
        }
    )


def _bound_claim(api: ClusterApi, pod: str) -> dict[str, Any] | None:
    current = api.get("Pod", pod, namespace=NS) or {}
    statuses = current.get("status", {}).get("resourceClaimStatuses") or []
    if current.get("spec", {}).get("nodeName") != NODE or not statuses:
        return None
    return api.get("ResourceClaim", statuses[0]["resourceClaimName"], namespace=NS)


def _unschedulable(api: ClusterApi, pod: str) -> bool:
    current = api.get("Pod", pod, namespace=NS) or {}
    conditions = current.get("status", {}).get("conditions") or []
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _ref(claim: dict[str, Any]) -> KubeletClaim:
    meta = claim["metadata"]
    return KubeletClaim(NS, meta["uid"], meta["name"])


async def test_a_shared_device_goes_to_two_claims_and_an_exclusive_one_to_one(
    hostdev_node: HostdevNode,
) -> None:
    api, plugin = hostdev_node.api, hostdev_node.plugin
    [published] = api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}")
    devices = {d["name"]: d for d in published["spec"]["devices"]}
    assert devices["shared-shared0"]["allowMultipleAllocations"] is True
    assert devices["shared-shared0"]["capacity"]["shares"]["value"] == "2"
    assert "allowMultipleAllocations" not in devices["excl-excl0"]

    for group in GROUPS:
        _template(api, group)
    # The shared pods one after the other: created together on a loaded CI machine, the
    # second once stayed unbound past the minute (the scheduler's queue, not the
    # devices); one at a time, the test waits on what dralet published.
    shared = []
    for name in ("s1", "s2"):
        _pod(api, name, "shared")
        shared.append(await eventually(functools.partial(_bound_claim, api, name), f"{name} bound"))
    for name in ("e1", "e2"):
        _pod(api, name, "excl")
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in shared]
    assert {r["device"] for r in results} == {"shared-shared0"}
    assert all(r.get("shareID") for r in results) and results[0]["shareID"] != results[1]["shareID"]
    assert [r.get("consumedCapacity") for r in results] == [{"shares": "1"}] * 2
    prepared = await plugin.prepare([_ref(c) for c in shared])
    assert prepared.kubelet_error == "", hostdev_node.driver.log()
    ids = [prepared.cdi_ids(c["metadata"]["uid"]) for c in shared]
    assert ids[0] and ids[1] and not set(ids[0]) & set(ids[1])

    async def one_exclusive_bound() -> str:
        def settled() -> str | None:
            bound = [n for n in ("e1", "e2") if _bound_claim(api, n)]
            waiting = [n for n in ("e1", "e2") if _unschedulable(api, n)]
            return bound[0] if len(bound) == 1 and len(waiting) == 1 else None

        return str(await eventually(settled, "one exclusive pod bound, the other unschedulable"))

    winner = await one_exclusive_bound()
    claim = _bound_claim(api, winner)
    assert claim is not None
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "excl-excl0"
    assert (await plugin.prepare([_ref(claim)])).kubelet_error == ""
    unprepared = await plugin.unprepare([_ref(c) for c in [*shared, claim]])
    assert unprepared.kubelet_error == "", hostdev_node.driver.log()
