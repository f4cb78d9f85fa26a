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

GPUs may also be split into partitions or shared (``inventory.Layout``). Preparing a
partition creates it (``EXAMPLE_GPU_<index>_PART_<j>`` in the container) and releasing
it destroys it; the hardware refuses a partition of a GPU another claim holds whole, and
the whole GPU while another claim holds a partition of it. A share of a shared GPU gets
its ``shareID`` and the memory it consumes (``EXAMPLE_GPU_<index>_SHARE``, ``..._MEMORY``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.example.inventory import DeviceName, Layout

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
        partitions: int = 0,
        shared: int = 0,
    ) -> None:
        self.state_dir = state_dir
        self.node_name = node_name
        self.count = count
        self.model = model
        self.memory = memory
        self.partitions = partitions
        self.shared = shared
        Layout(count, memory, partitions=partitions, shared=shared)  # refuses a bad one now
        self.prepare_delay = dict(prepare_delay or {})
        self._survives_reboot = survives_reboot
        self._state_path = state_dir / "gpus.json"
        self._health_path = state_dir / "health.json"
        self._lock = dralet.FileLock(state_dir / "gpus.lock")
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def layout(self) -> Layout:
        """Computed each time: a test (or hot plug) may change ``count``."""
        return Layout(self.count, self.memory, partitions=self.partitions, shared=self.shared)

    def gpu_uuid(self, index: int) -> str:
        return self.device_uuid(f"gpu-{index}")

    def device_uuid(self, device: str) -> str:
        name = device.removeprefix("gpu-")
        return "GPU-" + str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"dralet-example/{self.node_name}/{name}")
        )

    # The "hardware" state: which claim each GPU is prepared for, and each shared GPU's
    # shares (claim UID -> share ID -> memory).

    def _state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            data = {}
        data.setdefault("inUse", {})
        data.setdefault("shares", {})
        return data

    def in_use(self) -> dict[str, str]:
        in_use: dict[str, str] = self._state()["inUse"]
        return in_use

    def shares(self) -> dict[str, dict[str, dict[str, str]]]:
        shares: dict[str, dict[str, dict[str, str]]] = self._state()["shares"]
        return shares

    def _save(self, state: Mapping[str, Any]) -> None:
        """Write ``_state()``'s document back (``shares`` only when there are any)."""
        document: dict[str, Any] = {"inUse": dict(state["inUse"])}
        if state["shares"]:
            document["shares"] = dict(state["shares"])
        dralet.atomic_write(self._state_path, json.dumps(document, sort_keys=True).encode())

    def _name(self, claim: dralet.ClaimRef, device: str) -> DeviceName:
        name = self.layout.parse(device)
        if name is None:
            raise dralet.ClaimError(claim.uid, f"no such simulated GPU {device!r}")
        return name

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
        return self.layout.devices(uuid_of=self.device_uuid, model=self.model)

    async def counter_sets(self) -> Sequence[dralet.CounterSet]:
        return self.layout.counter_sets()

    def _conflict(self, in_use: Mapping[str, str], name: DeviceName, claim: str) -> str:
        """Another claim's hold on the same silicon: the whole GPU for a partition, a
        partition for the whole GPU. Only the names sharing ``name``'s GPU are looked up,
        so a take costs the same with 1 or 1,000 devices held."""
        whole = f"gpu-{name.gpu}"
        if name.partition is not None:
            others = [whole]
        elif self.layout.is_partitioned(name.gpu):
            others = [f"{whole}-part-{j}" for j in range(self.partitions)]
        else:
            others = []
        for device in others:
            holder = in_use.get(device)
            if holder and holder != claim:
                return f"{device} is in use by claim {holder} in the hardware"
        return ""

    async def prepare(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice
    ) -> dralet.PreparedDevice:
        """Prepare one device of ``claim`` (the building block of ``prepare_claim``)."""
        name = self._name(claim, device.device)
        index = name.gpu
        delay = self.prepare_delay.get(device.device, 0.0)
        if delay:
            await asyncio.sleep(delay)
        shared = self.layout.is_shared(index)
        memory = str(device.consumed_capacity.get("memory", ""))
        # The "hardware" is a file: its read-modify-write runs off the event loop, with
        # the lock taken in the same thread, so a cancelled caller never leaves it half
        # done for the next one.
        info_dir = await asyncio.to_thread(self._take, claim, device, name, shared, memory)
        mode = self.mode(device)
        env = [f"EXAMPLE_GPU_{index}={self.gpu_uuid(index)}"]
        if mode:
            env.append(f"EXAMPLE_GPU_{index}_MODE={mode}")
        if name.partition is not None:
            env.append(
                f"EXAMPLE_GPU_{index}_PART_{name.partition}={self.device_uuid(device.device)}"
            )
        if shared:
            env += [f"EXAMPLE_GPU_{index}_SHARE={device.share_id}"]
            env += [f"EXAMPLE_GPU_{index}_MEMORY={memory}"] if memory else []
        edits = dralet.ContainerEdits(
            env=tuple(env),
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
        if name.partition is not None:
            state["partition"] = name.partition
        if shared:
            state["share"] = {"id": device.share_id, "memory": memory}
        return dralet.PreparedDevice(edits=edits, state=state)

    def _take(
        self,
        claim: dralet.ClaimRef,
        device: dralet.AllocatedDevice,
        name: DeviceName,
        shared: bool,
        memory: str,
    ) -> Path:
        """Mark ``device`` as ``claim``'s (or add its share); its info dir."""
        with self._lock.hold():
            state_now = self._state()
            in_use, shares = state_now["inUse"], state_now["shares"]
            if shared:
                if not device.share_id:
                    raise dralet.ClaimError(claim.uid, f"{device.device} is shared: no shareID")
                mine = shares.setdefault(device.device, {}).setdefault(claim.uid, {})
                mine[device.share_id] = memory
                self._save(state_now)
            else:
                holder = in_use.get(device.device)
                if holder and holder != claim.uid and not device.admin_access:
                    raise dralet.ClaimError(
                        claim.uid, f"{device.device} is in use by claim {holder} in the hardware"
                    )
                conflict = "" if device.admin_access else self._conflict(in_use, name, claim.uid)
                if conflict:
                    raise dralet.ClaimError(claim.uid, conflict)
                if not device.admin_access:
                    in_use[device.device] = claim.uid
                    self._save(state_now)
        info_dir = self.state_dir / "info" / device.device
        info_dir.mkdir(parents=True, exist_ok=True)
        (info_dir / "uuid").write_text(self.device_uuid(device.device) + "\n")
        return info_dir

    async def release(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        """Release one device of ``claim`` (the building block of ``release_claim``); a
        partition is destroyed, a share given back."""
        await asyncio.to_thread(self._give_back, claim, device)

    def _give_back(self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice) -> None:
        with self._lock.hold():
            state_now = self._state()
            in_use, shares = state_now["inUse"], state_now["shares"]
            mine = shares.get(device.device, {}).get(claim.uid, {})
            if device.share_id and device.share_id in mine:
                del mine[device.share_id]
                if not mine:
                    del shares[device.device][claim.uid]
                if not shares[device.device]:
                    del shares[device.device]
                self._save(state_now)
            elif in_use.get(device.device) == claim.uid:
                del in_use[device.device]
                self._save(state_now)

    async def devices_in_use(self) -> Mapping[str, str | Sequence[str]]:
        state = await asyncio.to_thread(self._state)
        held: dict[str, str | Sequence[str]] = dict(state["inUse"])
        for device, by_claim in state["shares"].items():
            held[device] = sorted(by_claim)
        return held

    async def survives_reboot(
        self, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> bool:
        return self._survives_reboot

    async def health(self) -> Mapping[str, dralet.DeviceHealth]:
        try:
            unhealthy: dict[str, str] = json.loads(self._health_path.read_text())
        except FileNotFoundError:
            unhealthy = {}
        # A partition is as healthy as its GPU.
        health: dict[str, dralet.DeviceHealth] = {}
        for name, which in self.layout.names():
            reason = unhealthy.get(name) or unhealthy.get(f"gpu-{which.gpu}")
            health[name] = (
                dralet.DeviceHealth(dralet.HealthStatus.UNHEALTHY, reason)
                if reason
                else dralet.DeviceHealth(dralet.HealthStatus.HEALTHY)
            )
        return health
