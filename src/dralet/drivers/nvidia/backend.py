"""NVIDIA GPUs as DRA devices: every GPU NVML enumerates, whole.

A GPU is published as ``gpu-<minor>``, named by its device node's minor number, which
stays when another GPU falls off the bus (NVML's indexes shift then), with what a user
selects on (``productName``,
``architecture``, ``cudaComputeCapability`` and ``driverVersion`` as versions, ``uuid``,
``pciBusID``, ``numaNode``, ``index``) and its ``memory`` as capacity. Preparing it gives
the container its device node ``/dev/nvidia<minor>`` and those of the driver's control
nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``,
``/dev/nvidia-modeset``) the host has; the runtime adds the cgroup rules. Releasing it
is nothing: no GPU setting is changed, so there is no hardware state to undo, and
``devices_in_use`` is read from dralet's own claim records, as for hostdev.

The user-space libraries are not mounted yet; a container image that brings its own
CUDA user-space, matched to the node's driver, works today.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.heldrecords import HeldRecords, NoHardwareState
from dralet.drivers.nvidia.nvml import Gpu, Nvml, NvmlError

__all__ = ["CONTROL_NODES", "NvidiaGpus", "semantic_version"]

log = logging.getLogger(__name__)

CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
"""The driver's device nodes every CUDA process opens besides its GPU's (the ones a
host lacks, e.g. nvidia-modeset on a headless node, are left out)."""
_VERSION_PARTS = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")


def semantic_version(text: str) -> dralet.Version | None:
    """A driver version (``550.54.15``, ``535.104.05``, ``560.28``) as strict semver
    (``535.104.5``, ``560.28.0``): leading zeros dropped, missing parts 0."""
    match = _VERSION_PARTS.match(text.strip())
    if match is None:
        return None
    parts = [int(part or 0) for part in match.groups()]
    return dralet.Version(".".join(map(str, parts)))


def _name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor_number}"


def _memory(total: int) -> str:
    mib = 1 << 20
    return f"{total // mib}Mi" if total % mib == 0 else str(total)


class NvidiaGpus(NoHardwareState):
    """A ``dralet.ClaimBackend`` over the GPUs of ``nvml``; device nodes under
    ``dev_root`` (``/`` on a node; the host's root where the driver sees it elsewhere)."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        store_path: Path,
        legacy_path: Path | None = None,
        dev_root: Path = Path("/"),
    ) -> None:
        self.nvml = nvml
        self.dev_root = dev_root
        self.records = HeldRecords(store_path, legacy_path, driver="nvidia")
        self._reported = ""
        """The last NVML failure logged (each new one is logged once)."""

    # ------------------------------------------------------------------ discovery

    def gpus(self) -> dict[str, Gpu]:
        """The GPUs NVML enumerates now, by device name."""
        with self.nvml.session() as nvml:
            return {_name(gpu): gpu for gpu in nvml.gpus()}

    def _host(self, path: str) -> Path:
        return self.dev_root / path.lstrip("/")

    # ------------------------------------------------------------------ ClaimBackend

    def devices(self) -> list[dralet.Device]:
        with self.nvml.session() as nvml:
            driver = semantic_version(nvml.driver_version())
            gpus = nvml.gpus()
        return [self._device(_name(gpu), gpu, driver) for gpu in gpus]

    @staticmethod
    def _device(name: str, gpu: Gpu, driver: dralet.Version | None) -> dralet.Device:
        major, minor = gpu.compute_capability
        attributes: dict[str, dralet.AttributeValue] = {
            "type": "gpu",
            "uuid": gpu.uuid,
            "productName": gpu.name,
            "architecture": gpu.architecture,
            "cudaComputeCapability": dralet.Version(f"{major}.{minor}.0"),
            "pciBusID": gpu.pci_bus_id.lower(),
            "index": gpu.index,
            "minor": gpu.minor_number,
        }
        if driver is not None:
            attributes["driverVersion"] = driver
        if gpu.numa_node is not None:
            attributes["numaNode"] = gpu.numa_node
        return dralet.Device(
            name=name, attributes=attributes, capacity={"memory": _memory(gpu.memory_bytes)}
        )

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        found = self.gpus()
        controls = [p for p in CONTROL_NODES if self._host(p).exists()]
        prepared = []
        for allocated in allocation.devices:
            gpu = found.get(allocated.device)
            if gpu is None:
                raise dralet.ClaimError(
                    allocation.claim.uid, f"GPU {allocated.device} is not on this node now"
                )
            node = f"/dev/nvidia{gpu.minor_number}"
            if not self._host(node).exists():
                raise dralet.ClaimError(
                    allocation.claim.uid, f"GPU {allocated.device}: {self._host(node)} is missing"
                )
            nodes = tuple(
                dralet.DeviceNode(path=path, host_path=str(self._host(path)))
                for path in (node, *controls)
            )
            prepared.append(
                dralet.PreparedDevice(
                    edits=dralet.ContainerEdits(
                        device_nodes=nodes,
                        env=(f"DRALET_NVIDIA_GPU_{gpu.minor_number}={gpu.uuid}",),
                    ),
                    state={"uuid": gpu.uuid, "minor": gpu.minor_number},
                )
            )
        return prepared

    def survives_reboot(self, device: dralet.AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """Still prepared when the same GPU (UUID) answers to the same device name."""
        gpu = self.gpus().get(device.device)
        return gpu is not None and gpu.uuid == state.get("uuid")

    def health(self) -> dict[str, dralet.DeviceHealth]:
        """Healthy while NVML enumerates it; a held GPU that is gone (or replaced) is not."""
        try:
            found = self.gpus()
        except NvmlError as exc:
            reason = f"NVML: {exc}"
            if reason != self._reported:
                self._reported = reason
                log.warning("nvidia: GPUs cannot be read: %s", reason)
            return {
                name: dralet.DeviceHealth(dralet.HealthStatus.UNKNOWN, reason)
                for name in self.records.holders()
            }
        self._reported = ""
        health = {name: dralet.DeviceHealth(dralet.HealthStatus.HEALTHY) for name in found}
        for name, holders in self.records.holders().items():
            for _, state in holders:
                gpu = found.get(name)
                if state and (gpu is None or gpu.uuid != state.get("uuid")):
                    health[name] = dralet.DeviceHealth(
                        dralet.HealthStatus.UNHEALTHY, f"GPU {state.get('uuid')} is gone"
                    )
        return health
