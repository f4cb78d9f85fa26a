"""The NVIDIA driver's spec through a real CDI consumer: a GPU prepared on a fake NVML,
with device nodes made by mknod (``/dev/null``'s numbers under NVIDIA's names), resolves
in podman and the container sees its GPU's node and the control nodes, with the
numbers of the host's nodes."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from tests.harness import podman
from tests.nvidia.fakenvml import FakeNvml
from tests.nvidia.test_nvidia_gpus import driver_root

from dralet.drivers.nvidia.backend import NvidiaGpus
from dralet.drivers.nvidia.nvml import Nvml
from dralet.node.settings import DriverSettings
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node

pytestmark = pytest.mark.runtime

DRIVER = "gpu.nvidia.com"
NODES = ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def device_tree(root: Path) -> Path:
    dev = root / "dev"
    dev.mkdir(parents=True)
    null = os.stat("/dev/null")
    for name in NODES:
        os.mknod(dev / name, stat.S_IFCHR | 0o666, null.st_rdev)
    return root


async def run_on(
    settings: DriverSettings,
    gpus: NvidiaGpus,
    device: str,
    podman_settings: podman.PodmanSettings,
    command: tuple[str, ...] = (),
) -> podman.ContainerRun:
    """Prepare ``device`` for a claim, run a container with the claim's CDI ids, and
    unprepare it again."""
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("gpu", device)]))
    async with running_node(settings, gpus, claims=claims) as node:
        prepared = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        run = await asyncio.to_thread(
            podman.run_container,
            settings.cdi_dir,
            prepared.cdi_ids(claim["metadata"]["uid"]),
            command=command,
            settings=podman_settings,
        )
        assert (await node.unprepare(claim)).kubelet_error == ""
    return run


async def test_a_prepared_gpu_resolves_and_the_container_sees_its_nodes(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(FakeNvml(count=2)),
        ledger_dir=settings.plugin_dir,
        dev_root=device_tree(short_tmp / "host"),
    )
    run = await run_on(settings, gpus, "gpu-1", podman_settings)
    assert run.ok, run.cdi_error or run.stderr
    null = os.stat("/dev/null")
    for path in ("/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        seen = run.dev[path]
        assert (seen.type, seen.major, seen.minor) == (
            "c",
            os.major(null.st_rdev),
            os.minor(null.st_rdev),
        ), path
    assert "/dev/nvidia0" not in run.dev
    assert "/dev/nvidia-modeset" not in run.dev


async def test_with_the_toolkit_spec_the_container_gets_its_nodes_and_libraries(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    """``toolkitCdi``: the device's id of the NVIDIA Container Toolkit's spec (here one
    written as ``nvidia-ctk cdi generate --device-name-strategy=uuid`` would, naming the
    fake nodes and a stand-in library) resolves beside dralet's own, which holds env."""
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    host = device_tree(short_tmp / "host")
    library = host / "lib" / "libnvidia-ml.so.1"
    library.parent.mkdir()
    library.write_text("stand-in for the driver's user-space library\n")
    nvml = FakeNvml(count=2)
    gpus = NvidiaGpus(
        Nvml(nvml),
        ledger_dir=settings.plugin_dir,
        dev_root=host,
        toolkit_cdi=True,
    )
    settings.cdi_dir.mkdir(parents=True, exist_ok=True)
    toolkit = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": gpu.uuid,
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/nvidia{i}", "hostPath": str(host / f"dev/nvidia{i}")}
                    ]
                },
            }
            for i, gpu in enumerate(nvml.gpus)
        ],
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(host / "dev/nvidiactl")}],
            "mounts": [
                {
                    "hostPath": str(library),
                    "containerPath": "/usr/lib/libnvidia-ml.so.1",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
        },
    }
    (settings.cdi_dir / "nvidia.json").write_text(json.dumps(toolkit))
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("gpu", "gpu-1")]))
    uid = claim["metadata"]["uid"]
    async with running_node(settings, gpus, claims=claims) as node:
        prepared = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        ids = prepared.cdi_ids(uid)
        assert ids[1] == f"nvidia.com/gpu={nvml.gpus[1].uuid}"
        run = await asyncio.to_thread(
            podman.run_container,
            settings.cdi_dir,
            ids,
            command=("cat", "/usr/lib/libnvidia-ml.so.1"),
            settings=podman_settings,
        )
        assert run.ok, run.cdi_error or run.stderr
        assert {"/dev/nvidia1", "/dev/nvidiactl"} <= set(run.dev)
        assert "/dev/nvidia0" not in run.dev
        assert run.env["DRALET_NVIDIA_GPU_1"] == nvml.gpus[1].uuid
        assert "stand-in" in run.stdout
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert (settings.cdi_dir / "nvidia.json").exists()  # the toolkit's spec is not dralet's


async def test_a_mig_device_made_at_prepare_resolves_with_its_capability_nodes(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    """``mig: dynamic``: prepare makes a MIG device on GPU 0; the container sees the GPU's
    node, the control nodes and the two /dev/nvidia-caps nodes of the MIG device."""
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    host = device_tree(short_tmp / "host")
    nvml = FakeNvml(count=2, mig={0}, proc_root=host / "proc", dev_root=host, device_nodes=True)
    gpus = NvidiaGpus(
        Nvml(nvml),
        ledger_dir=settings.plugin_dir,
        dev_root=host,
        proc_root=host / "proc",
        mig_mode="dynamic",
    )
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("m", "gpu-0-mig-3g-40gb-4")]))
    uid = claim["metadata"]["uid"]
    async with running_node(settings, gpus, claims=claims) as node:
        prepared = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        caps = sorted(p.name for p in (host / "dev" / "nvidia-caps").iterdir())
        assert len(caps) == 2
        run = await asyncio.to_thread(
            podman.run_container, settings.cdi_dir, prepared.cdi_ids(uid), settings=podman_settings
        )
        assert run.ok, run.cdi_error or run.stderr
        expected = {"/dev/nvidia0", "/dev/nvidiactl", *(f"/dev/nvidia-caps/{c}" for c in caps)}
        assert expected <= set(run.dev)
        assert run.env["DRALET_NVIDIA_GPU_0"].startswith("MIG-")
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert list((host / "dev" / "nvidia-caps").iterdir()) == []


async def test_the_drivers_libraries_are_mounted_where_cuda_images_look(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    """Without the toolkit's spec, the libraries found under the driver root are mounted
    read-only at /usr/local/nvidia/lib64 under their file name and soname."""
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(FakeNvml(count=2)),
        ledger_dir=settings.plugin_dir,
        dev_root=device_tree(short_tmp / "host"),
        driver_root=driver_root(short_tmp / "driver-root"),
    )
    read = "cat /usr/local/nvidia/lib64/libcuda.so.1 /usr/local/nvidia/lib64/"
    read += "libnvidia-ml.so.550.54.15 && ! touch /usr/local/nvidia/lib64/libcuda.so.1"
    run = await run_on(settings, gpus, "gpu-0", podman_settings, ("sh", "-c", read))
    assert run.ok, run.cdi_error or run.stderr
    assert run.stdout.splitlines() == [
        "libcuda.so 550.54.15",
        "libnvidia-ml.so 550.54.15",
    ]
    assert "/dev/nvidia0" in run.dev
