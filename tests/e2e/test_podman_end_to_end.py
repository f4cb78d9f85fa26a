"""End to end with a real CDI consumer: the kubelet emulator prepares claims through the
driver process, podman resolves the returned CDI ids from the driver's CDI directory,
and the container sees exactly its claim's devices — and nothing after unprepare.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator
from tests.harness import podman

pytestmark = [pytest.mark.e2e, pytest.mark.runtime]

AVAILABLE = podman.available()


@pytest.mark.skipif(not AVAILABLE, reason=f"no container runtime: {AVAILABLE.reason}")
async def test_container_gets_its_claims_devices_only(short_tmp: Path) -> None:
    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        paths = DriverPaths(short_tmp / "node")
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish"]),
            log_path=short_tmp / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        driver.start()
        try:
            plugin = await kubelet.wait_for_plugin("gpu.example.com")
            a = cluster.allocate_claim("a", [("gpu", "gpu-0")])
            b = cluster.allocate_claim("b", [("gpu", "gpu-1")])
            prepared = await plugin.prepare([a, b])
            assert prepared.kubelet_error == "", driver.log()
            a_ids, b_ids = prepared.cdi_ids(a.uid), prepared.cdi_ids(b.uid)

            baseline = await asyncio.to_thread(podman.run_container, paths.cdi_dir, [])
            run = await asyncio.to_thread(podman.run_container, paths.cdi_dir, a_ids)
            assert run.ok, (run.stderr, run.cdi_error)
            changes = run.changes_from(baseline)
            assert set(changes.env) == {"EXAMPLE_GPU_0"}
            assert changes.env["EXAMPLE_GPU_0"].startswith("GPU-")
            assert "/dev/example-gpu0" in run.device_nodes()
            assert "/dev/example-gpu1" not in run.dev
            assert run.mount_at("/run/example-gpu/gpu-0") is not None
            assert run.mount_at("/run/example-gpu/gpu-1") is None

            both = await asyncio.to_thread(podman.run_container, paths.cdi_dir, [*a_ids, *b_ids])
            assert both.ok, both.cdi_error
            assert {"EXAMPLE_GPU_0", "EXAMPLE_GPU_1"} <= set(both.env)

            assert (await plugin.unprepare([a])).kubelet_error == ""
            gone = await asyncio.to_thread(podman.run_container, paths.cdi_dir, a_ids)
            assert gone.unresolvable, (gone.exit_code, gone.stderr)
            still = await asyncio.to_thread(podman.run_container, paths.cdi_dir, b_ids)
            assert still.ok, still.cdi_error
        finally:
            await kubelet.close()
            await driver.terminate()
