"""A rolling update of the driver on real Kubernetes, each release CI builds (seamless upgrade,
1.33+): a second instance starts beside the first with its own sockets (``--pod-uid``), the
old one stops; a claim the old instance prepared is unprepared by the new one, and the
node's devices stay published all along: no moment without them, no flapping."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from dralet.cluster import DriverProcess
from tests.k8s.drivernode import DRIVER, NODE, Node, eventually
from tests.k8s.test_end_to_end import pod, run_pod
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, pytest.mark.e2e, K8S_TIMEOUT]

NEW_POD_UID = "0b6a3f3e-7c2d-4c55-8a0e-2f1d9c4b7a61"
NS = "default"


async def test_a_rolling_update_hands_over_claims_and_keeps_the_slices(
    node: Node, short_tmp: Path
) -> None:
    api = node.api

    def published() -> tuple[str, ...]:
        slices = api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}")
        return tuple(sorted(d["name"] for s in slices for d in s["spec"].get("devices", ())))

    before = await eventually(published, "devices published")
    seen: list[tuple[str, ...]] = []
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            seen.append(await asyncio.to_thread(published))
            await asyncio.sleep(0.05)

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
    api.create(pod("held", {"resourceClaimTemplateName": "one-gpu"}))
    ref, _ = await run_pod(node, "held")  # prepared through the old instance

    watcher = asyncio.create_task(watch())
    new = DriverProcess(
        [*node.driver.args, "--pod-uid", NEW_POD_UID], log_path=short_tmp / "new.log"
    )
    try:
        new.start()
        new_socket = node.paths.registry_dir / f"{DRIVER}-{NEW_POD_UID}-reg.sock"
        await eventually(new_socket.is_socket, "the new instance's registration socket")
        new_plugin = await node.kubelet.register(new_socket)
        await node.driver.terminate()  # the old pod goes
        again = await new_plugin.prepare([ref])
        assert again.kubelet_error == "", new.log()
        unprepared = await new_plugin.unprepare([ref])
        assert unprepared.kubelet_error == "", new.log()

        def finalizer_removed() -> bool:
            # The answer follows the local teardown; the finalizer removal it owes comes after.
            claim = api.get("ResourceClaim", ref.name, namespace=NS) or {}
            return f"{DRIVER}/prepared" not in (claim.get("metadata", {}).get("finalizers") or [])

        await eventually(finalizer_removed, "the new instance removed the driver's finalizer")
        await asyncio.sleep(1.0)  # let the new instance's publisher settle, still watched
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await new.terminate()
        node.driver.start()  # the fixture stops what it started
    assert seen, "the slices were watched"
    assert set(seen) == {before}, f"devices changed during the update: {sorted(set(seen))}"
