"""Simulated GPUs: a ``dralet.ClaimBackend`` whose "hardware" is a directory of state files.

Each GPU has a UUID, a model, an index and a memory capacity. Preparing one for a claim
records the claim as the device's hold (``{"claim": "<uid>"}``, or ``{"shares": {"<uid>":
{"<shareID>": "<memory>"}}}`` for a shared GPU), and injects an env var, a device node and
a read-only info mount into the container; releasing it removes the hold. The holds of GPU
``i`` live in ``<state_dir>/holds/shard-<i mod 64>.json`` (device -> hold), read and
written under that file's lock (``<state_dir>/locks/shard-<k>.lock``, shared by every
process using the directory). On a node of up to 64 GPUs a take or give-back so reads and
writes only its own GPU's holds, whatever else is held; on a larger one, those of the
``count / 64`` GPUs sharing its file; and listing every hold (each start, each audit)
reads at most 64 files. Because the holds live outside dralet's checkpoint, a device that
dralet forgot to release is visible there: that is what makes a leak observable in tests.
(An earlier release's single ``gpus.json`` is taken over at start.) ``health.json`` in the
same directory (``{"gpu-1": "reason"}``) marks devices unhealthy.

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
import errno
import json
import os
import stat
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.example.inventory import DeviceName, Layout, split_name

__all__ = ["DRIVER_NAME", "SimulatedGPUs", "held_devices"]

DRIVER_NAME = "gpu.example.com"
DEFAULT_MODEL = "SIM-H100"
DEFAULT_MEMORY = "80Gi"
DEVICE_NODE_HOST_PATH = "/dev/null"
INFO_MOUNT_DIR = "/run/example-gpu"


HOLDS_DIR = "holds"
"""Under the state dir: ``shard-<k>.json``, the holds of the GPUs whose index is k modulo
``SHARDS``."""
LOCKS_DIR = "locks"
"""Under the state dir: ``shard-<k>.lock``, one per holds file."""
SHARDS = 64
"""How many files the holds are spread over: a GPU's devices always share one."""


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _load(path: str | Path, *, dir_fd: int | None = None) -> dict[str, Any]:
    """A device's document; empty when it has none (nothing held). Anything but a
    regular file there was not written by this backend: it is refused, never read."""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return {}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = os.read(fd, info.st_size)  # replaced by rename, never written in place
    finally:
        os.close(fd)
    document: dict[str, Any] = json.loads(data)
    return document


def _device_documents(holds_dir: Path) -> dict[str, dict[str, Any]]:
    """Every held device's hold, by device (each file read whole; together they are not one
    snapshot). Read at every start and audit: one file per shard in use, whatever is held."""
    documents: dict[str, dict[str, Any]] = {}
    # Each file opened by name relative to the folder: no path built or walked per file.
    folder = os.open(holds_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in os.listdir(folder):
            if not name.endswith(".json") or name.startswith("."):
                continue  # a temporary file of a write under way, or not this backend's
            documents.update(_load(name, dir_fd=folder))
    finally:
        os.close(folder)
    return dict(sorted(documents.items()))


def held_devices(state_dir: Path) -> dict[str, str | Sequence[str]]:
    """What the simulated GPUs under ``state_dir`` hold: each device's claim UID, or the
    sorted UIDs of the claims holding a share of it."""
    held: dict[str, str | Sequence[str]] = {}
    for device, document in _device_documents(state_dir / HOLDS_DIR).items():
        if "claim" in document:
            held[device] = document["claim"]
        elif document.get("shares"):
            held[device] = sorted(document["shares"])
    return held


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
        self._health_path = state_dir / "health.json"
        self._holds_dir = state_dir / HOLDS_DIR
        self._locks_dir = state_dir / LOCKS_DIR
        for directory in (state_dir, self._holds_dir, self._locks_dir):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._import_single_file()

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

    # The "hardware" state: the holds of a GPU's shard, read and written under its lock.

    def _holds_path(self, gpu: int) -> Path:
        return self._holds_dir / f"shard-{gpu % SHARDS}.json"

    def _lock(self, gpu: int) -> dralet.FileLock:
        return dralet.FileLock(self._locks_dir / f"shard-{gpu % SHARDS}.lock")

    def _holds(self, gpu: int) -> dict[str, dict[str, Any]]:
        """Device -> hold, for the devices of ``gpu``'s shard (its lock held)."""
        return _load(self._holds_path(gpu))

    def _put(
        self, gpu: int, holds: dict[str, dict[str, Any]], device: str, hold: dict[str, Any]
    ) -> None:
        """``device``'s hold becomes ``hold`` (gone when empty) in ``holds``, ``gpu``'s shard
        as read under its lock, which is stored; its file is removed when nothing is held."""
        if hold:
            holds[device] = hold
        else:
            holds.pop(device, None)
        if holds:
            dralet.atomic_write(self._holds_path(gpu), json.dumps(holds, sort_keys=True).encode())
        else:
            dralet.remove_file(self._holds_path(gpu))

    def in_use(self) -> dict[str, str]:
        """Each device held whole (or as a partition) and its claim's UID."""
        documents = _device_documents(self._holds_dir)
        return {device: doc["claim"] for device, doc in documents.items() if "claim" in doc}

    def shares(self) -> dict[str, dict[str, dict[str, str]]]:
        """Each shared device's shares: claim UID -> share ID -> memory."""
        documents = _device_documents(self._holds_dir)
        return {device: doc["shares"] for device, doc in documents.items() if "shares" in doc}

    def mark_in_use(self, device: str, claim_uid: str) -> None:
        """Record ``device`` as held by ``claim_uid`` with no check, as a device taken
        behind dralet's back would be (how a test plants a hold dralet does not know of)."""
        name = split_name(device)
        if name is None:
            raise ValueError(f"not a simulated GPU name: {device!r}")
        with self._lock(name.gpu).hold():
            self._put(name.gpu, self._holds(name.gpu), device, {"claim": claim_uid})

    def _import_single_file(self) -> None:
        """Take over an earlier release's single ``gpus.json`` (a hold already in a shard
        is newer and wins), then remove it."""
        legacy = self.state_dir / "gpus.json"
        if not legacy.exists():
            return
        with dralet.FileLock(self.state_dir / "gpus.lock").hold():
            try:
                state: dict[str, Any] = json.loads(legacy.read_bytes())
            except FileNotFoundError:
                return  # another process imported it first
            held: dict[str, dict[str, Any]] = {
                **{d: {"claim": uid} for d, uid in state.get("inUse", {}).items()},
                **{d: {"shares": by_claim} for d, by_claim in state.get("shares", {}).items()},
            }
            for device, document in held.items():
                name = split_name(device)
                if name is None:
                    continue
                with self._lock(name.gpu).hold():
                    holds = self._holds(name.gpu)
                    if device not in holds:
                        self._put(name.gpu, holds, device, document)
            dralet.remove_file(legacy)

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

    def _conflict(self, name: DeviceName, claim: str, holds: Mapping[str, Any]) -> str:
        """Another claim's hold on the same silicon: the whole GPU for a partition, a
        partition for the whole GPU (``holds``: the GPU's shard, its lock held)."""
        whole = f"gpu-{name.gpu}"
        if name.partition is not None:
            others = [whole]
        elif self.layout.is_partitioned(name.gpu):
            others = [f"{whole}-part-{j}" for j in range(self.partitions)]
        else:
            others = []
        for device in others:
            holder = holds.get(device, {}).get("claim")
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
        with self._lock(name.gpu).hold():
            holds = self._holds(name.gpu)
            held = holds.get(device.device, {})
            if shared:
                if not device.share_id:
                    raise dralet.ClaimError(claim.uid, f"{device.device} is shared: no shareID")
                mine = held.setdefault("shares", {}).setdefault(claim.uid, {})
                if mine.get(device.share_id) != memory:
                    mine[device.share_id] = memory
                    self._put(name.gpu, holds, device.device, held)
            else:
                holder = held.get("claim")
                if holder and holder != claim.uid and not device.admin_access:
                    raise dralet.ClaimError(
                        claim.uid, f"{device.device} is in use by claim {holder} in the hardware"
                    )
                conflict = "" if device.admin_access else self._conflict(name, claim.uid, holds)
                if conflict:
                    raise dralet.ClaimError(claim.uid, conflict)
                if not device.admin_access and holder != claim.uid:
                    self._put(name.gpu, holds, device.device, {**held, "claim": claim.uid})
        info_dir = self.state_dir / "info" / device.device
        uuid_file = info_dir / "uuid"
        if not uuid_file.exists():  # the UUID never changes: written once
            info_dir.mkdir(parents=True, exist_ok=True)
            dralet.atomic_write(uuid_file, (self.device_uuid(device.device) + "\n").encode())
        return info_dir

    async def release(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        """Release one device of ``claim`` (the building block of ``release_claim``); a
        partition is destroyed, a share given back."""
        await asyncio.to_thread(self._give_back, claim, device)

    def _give_back(self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice) -> None:
        name = split_name(device.device)
        if name is None:
            return  # never taken: a take refuses a name that is not a GPU's
        with self._lock(name.gpu).hold():
            holds = self._holds(name.gpu)
            held = holds.get(device.device, {})
            mine = held.get("shares", {}).get(claim.uid, {})
            if device.share_id and device.share_id in mine:
                del mine[device.share_id]
                if not mine:
                    del held["shares"][claim.uid]
                if not held["shares"]:
                    del held["shares"]
            elif held.get("claim") == claim.uid:
                del held["claim"]
            else:
                return
            self._put(name.gpu, holds, device.device, held)

    async def devices_in_use(self) -> Mapping[str, str | Sequence[str]]:
        return await asyncio.to_thread(held_devices, self.state_dir)

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
