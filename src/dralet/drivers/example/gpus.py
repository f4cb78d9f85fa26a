"""Simulated GPUs: a ``dralet.ClaimBackend`` whose "hardware" is a state file.

Each GPU has a UUID, a model, an index and a memory capacity. Preparing one for a claim
records the claim in ``<state_dir>/gpus.json`` and injects an env var, a device node
and a read-only info mount into the container; releasing it clears the record. Because
the record lives outside dralet's checkpoint, a device that dralet forgot to release
is visible there: that is what makes a leak observable in tests. ``health.json`` in
the same directory (``{"gpu-1": "reason"}``) marks devices unhealthy.

A claim (or its DeviceClass) may set ``{"mode": "..."}`` in its opaque config; the
settings apply in precedence order (class before claim, later wins) and the mode is
passed to the container as ``EXAMPLE_GPU_<index>_MODE``. ``prepare_claim`` prepares a
claim's devices one by one with ``prepare`` (so a test can fail or gate one device).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet

__all__ = ["DRIVER_NAME", "SimulatedGPUs"]

DRIVER_NAME = "gpu.example.com"
DEFAULT_MODEL = "SIM-H100"
DEFAULT_MEMORY = "80Gi"
DEVICE_NODE_HOST_PATH = "/dev/null"
INFO_MOUNT_DIR = "/run/example-gpu"


class SimulatedGPUs:
    """``count`` GPUs named ``gpu-0`` … ``gpu-<count-1>``."""

    def __init__(
        self,
        *,
        state_dir: Path,
        node_name: str,
        count: int = 4,
        model: str = DEFAULT_MODEL,
        memory: str = DEFAULT_MEMORY,
        prepare_delay: Mapping[str, float] | None = None,
        survives_reboot: bool = True,
    ) -> None:
        self.state_dir = state_dir
        self.node_name = node_name
        self.count = count
        self.model = model
        self.memory = memory
        self.prepare_delay = dict(prepare_delay or {})
        self._survives_reboot = survives_reboot
        self._state_path = state_dir / "gpus.json"
        self._health_path = state_dir / "health.json"
        self._lock = dralet.FileLock(state_dir / "gpus.lock")
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def gpu_uuid(self, index: int) -> str:
        return "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"dralet-example/{self.node_name}/{index}")
        )

    # The "hardware" state: which claim each GPU is prepared for.

    def in_use(self) -> dict[str, str]:
        try:
            data: dict[str, str] = json.loads(self._state_path.read_text())["inUse"]
            return data
        except FileNotFoundError:
            return {}

    def _save(self, in_use: Mapping[str, str]) -> None:
        dralet.atomic_write(
            self._state_path, json.dumps({"inUse": dict(in_use)}, sort_keys=True).encode()
        )

    def _index(self, device: str) -> int:
        prefix, _, number = device.partition("-")
        if prefix != "gpu" or not number.isdigit() or int(number) >= self.count:
            raise dralet.ClaimError("", f"no such simulated GPU {device!r}")
        return int(number)

    # ClaimBackend

    async def prepare_claim(
        self, allocation: dralet.ClaimAllocation
    ) -> Sequence[dralet.PreparedDevice]:
        """Each device with ``prepare``; a failure after the first is partial."""
        prepared: list[dralet.PreparedDevice | None] = [None] * len(allocation.devices)
        for index, device in enumerate(allocation.devices):
            try:
                prepared[index] = await self.prepare(allocation.claim, device)
            except Exception as exc:
                if index == 0:
                    raise
                raise dralet.PartialPrepareError(exc, prepared) from exc
        return [p for p in prepared if p is not None]

    async def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Each device with ``release``."""
        for device, state in zip(allocation.devices, states, strict=True):
            await self.release(allocation.claim, device, state)

    @staticmethod
    def mode(device: dralet.AllocatedDevice) -> str:
        """The ``mode`` the device's configs set (class before claim; the last wins)."""
        mode = ""
        for config in device.configs:
            mode = str(config.parameters.get("mode", mode))
        return mode

    async def devices(self) -> Sequence[dralet.Device]:
        return [
            dralet.Device(
                name=f"gpu-{i}",
                attributes={
                    "uuid": self.gpu_uuid(i),
                    "model": self.model,
                    "index": i,
                    "driverVersion": dralet.Version("1.0.0"),
                },
                capacity={"memory": self.memory},
            )
            for i in range(self.count)
        ]

    async def prepare(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice
    ) -> dralet.PreparedDevice:
        """Prepare one device of ``claim`` (the building block of ``prepare_claim``)."""
        index = self._index(device.device)
        delay = self.prepare_delay.get(device.device, 0.0)
        if delay:
            await asyncio.sleep(delay)
        async with self._lock.acquire():
            in_use = self.in_use()
            holder = in_use.get(device.device)
            if holder and holder != claim.uid and not device.admin_access:
                raise dralet.ClaimError(
                    claim.uid, f"{device.device} is in use by claim {holder} in the hardware"
                )
            if not device.admin_access:
                in_use[device.device] = claim.uid
                self._save(in_use)
        info_dir = self.state_dir / "info" / device.device
        info_dir.mkdir(parents=True, exist_ok=True)
        (info_dir / "uuid").write_text(self.gpu_uuid(index) + "\n")
        mode = self.mode(device)
        edits = dralet.ContainerEdits(
            env=(f"EXAMPLE_GPU_{index}={self.gpu_uuid(index)}",)
            + ((f"EXAMPLE_GPU_{index}_MODE={mode}",) if mode else ()),
            device_nodes=(
                dralet.DeviceNode(path=f"/dev/example-gpu{index}", host_path=DEVICE_NODE_HOST_PATH),
            ),
            mounts=(
                dralet.Mount(
                    host_path=str(info_dir.absolute()),
                    container_path=f"{INFO_MOUNT_DIR}/{device.device}",
                    options=("ro", "bind"),
                ),
            ),
        )
        state: dict[str, Any] = {"index": index, **({"mode": mode} if mode else {})}
        return dralet.PreparedDevice(edits=edits, state=state)

    async def release(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        """Release one device of ``claim`` (the building block of ``release_claim``)."""
        async with self._lock.acquire():
            in_use = self.in_use()
            if in_use.get(device.device) == claim.uid:
                del in_use[device.device]
                self._save(in_use)

    async def devices_in_use(self) -> Mapping[str, str]:
        return self.in_use()

    async def survives_reboot(
        self, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> bool:
        return self._survives_reboot

    async def health(self) -> Mapping[str, dralet.DeviceHealth]:
        try:
            unhealthy: dict[str, str] = json.loads(self._health_path.read_text())
        except FileNotFoundError:
            unhealthy = {}
        return {
            f"gpu-{i}": (
                dralet.DeviceHealth(dralet.HealthStatus.UNHEALTHY, unhealthy[f"gpu-{i}"])
                if f"gpu-{i}" in unhealthy
                else dralet.DeviceHealth(dralet.HealthStatus.HEALTHY)
            )
            for i in range(self.count)
        }
