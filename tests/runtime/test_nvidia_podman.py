"""The NVIDIA driver's spec through a real CDI consumer: a GPU prepared on a fake NVML,
with device nodes made by mknod (``/dev/null``'s numbers under NVIDIA's names), resolves
in podman and the container sees its GPU's node and the control nodes, with the
numbers of the host's nodes."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from tests.harness import podman
from tests.nvidia.fakenvml import FakeNvml

from dralet.drivers.nvidia.backend import NvidiaGpus
from dralet.drivers.nvidia.nvml import Nvml
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


async def test_a_prepared_gpu_resolves_and_the_container_sees_its_nodes(
    short_tmp: Path, podman_settings: podman.PodmanSettings
) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(FakeNvml(count=2)),
        store_path=settings.store_path,
        legacy_path=settings.checkpoint_path,
        dev_root=device_tree(short_tmp / "host"),
    )
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("gpu", "gpu-1")]))
    async with running_node(settings, gpus, claims=claims) as node:
        prepared = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        run = await asyncio.to_thread(
            podman.run_container,
            settings.cdi_dir,
            prepared.cdi_ids(claim["metadata"]["uid"]),
            settings=podman_settings,
        )
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
