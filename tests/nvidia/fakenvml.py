"""A pure-Python NVML with pynvml's function names, for the NVIDIA driver's tests.

It plays a DGX H100 by default: eight "NVIDIA H100 80GB HBM3" GPUs (Hopper, compute
capability 9.0, 81,559 MiB each), four on each NUMA node, at the PCI addresses such a
system has, driver 550.54.15. Faults: ``lose(index)`` makes a GPU vanish from
enumeration (what NVML shows after an XID 79, "GPU has fallen off the bus"), ``fail``
makes every call raise. Like NVML it must be initialised before use and counts nested
initialisations.

MIG: ``mig`` lists the GPUs in MIG mode. Their GPU-instance profiles are the H100 80GB's
(NVIDIA's MIG user guide: seven of them, ``1g.10gb`` to ``7g.80gb``, with their memory
slices, compute slices, engines and placements); GPU and compute instances are created
and destroyed as NVML does, refusing overlapping placements and a GPU instance that still
has compute instances. Playing the kernel driver too, the fake writes each instance's
capability file under ``proc_root`` (``driver/nvidia/capabilities/gpu<minor>/mig/
gi<id>/access`` with its ``DeviceFileMinor``) and its ``nvidia-cap<minor>`` node under
``dev_root``. With ``state_file`` the instances live in that file, so a driver process
killed with -9 leaves them behind as real hardware would (``FAKE_NVML_STATE`` names the
file for a driver started as a process).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

H100_MEMORY = 81_559 * (1 << 20)
DGX_H100_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
ARCH_HOPPER = 9
STATE_ENV = "FAKE_NVML_STATE"


class NVMLError(Exception):
    """pynvml's error type (its message is NVML's)."""


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile of the H100 80GB (NVML_GPU_INSTANCE_PROFILE_* index)."""

    index: int
    id: int
    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    jpeg: int
    ofa: int
    instances: int
    starts: tuple[int, ...]


H100_PROFILES = (
    GiProfile(0, 19, "1g.10gb", 1, 1, 9_984, 16, 1, 1, 1, 0, 7, (0, 1, 2, 3, 4, 5, 6)),
    GiProfile(7, 20, "1g.10gb+me", 1, 1, 9_984, 16, 1, 7, 7, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    GiProfile(9, 15, "1g.20gb", 1, 2, 20_096, 26, 1, 1, 1, 0, 4, (0, 2, 4, 6)),
    GiProfile(1, 14, "2g.20gb", 2, 2, 20_096, 32, 2, 2, 2, 0, 3, (0, 2, 4)),
    GiProfile(2, 9, "3g.40gb", 3, 4, 40_448, 60, 3, 3, 3, 0, 2, (0, 4)),
    GiProfile(3, 5, "4g.40gb", 4, 4, 40_448, 64, 4, 4, 4, 0, 1, (0,)),
    GiProfile(4, 0, "7g.80gb", 7, 8, 81_152, 132, 8, 7, 7, 1, 1, (0,)),
)
"""``index`` is the profile NVML is asked about; ``id`` is what it creates with."""
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
"""NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE, the compute instance spanning a GPU instance."""


@dataclass
class FakeGpu:
    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus: str = "18"
    memory: int = H100_MEMORY
    capability: tuple[int, int] = (9, 0)
    architecture: int = ARCH_HOPPER
    numa: int = 0
    lost: bool = False


@dataclass(frozen=True)
class GpuInstance:
    """A handle: a GPU instance ``id`` on the GPU with ``minor``."""

    minor: int
    id: int


@dataclass(frozen=True)
class ComputeInstance:
    minor: int
    gi: int
    id: int


@dataclass(frozen=True)
class MigHandle:
    """The device handle of a MIG device (a compute instance)."""

    minor: int
    gi: int
    ci: int


@dataclass
class FakeNvml:
    node: str = "node-a"
    count: int = 8
    driver: str = "550.54.15"
    numa_supported: bool = True
    gpus: list[FakeGpu] = field(default_factory=list)
    inits: int = 0
    fail: str = ""
    """When set, every call raises NVMLError with it."""
    mig: set[int] = field(default_factory=set)
    """Minor numbers of the GPUs in MIG mode."""
    state_file: Path | None = None
    proc_root: Path | None = None
    dev_root: Path | None = None
    device_nodes: bool = False
    """Capability nodes are character devices (mknod, as root) instead of empty files."""
    pending: list[tuple[int, int, int | None, int | None]] = field(default_factory=list)
    """XID events not yet waited for: (minor, XID, GPU instance, compute instance)."""
    instances: dict[str, Any] = field(default_factory=dict)
    """``"<minor>"`` → ``{"<gi id>": {"profile": id, "start": n, "cis": [ci ids]}}``."""
    NVMLError: type[Exception] = NVMLError
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def __post_init__(self) -> None:
        if not self.gpus:
            self.gpus = [
                FakeGpu(
                    index=i,
                    uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"fake-nvml/{self.node}/{i}")),
                    bus=DGX_H100_BUSES[i % len(DGX_H100_BUSES)],
                    numa=0 if i < self.count // 2 else 1,
                )
                for i in range(self.count)
            ]
        if self.state_file is None and os.environ.get(STATE_ENV):
            self.state_file = Path(os.environ[STATE_ENV])
        if self.state_file is not None:
            self._load()

    # -- persistence ----------------------------------------------------------------------

    def _load(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        saved = json.loads(self.state_file.read_text())
        self.mig = set(saved.get("mig", []))
        self.instances = saved.get("instances", {})
        self.proc_root = Path(saved["proc"]) if saved.get("proc") else self.proc_root
        self.dev_root = Path(saved["dev"]) if saved.get("dev") else self.dev_root

    def save(self) -> None:
        if self.state_file is None:
            return
        state = {
            "mig": sorted(self.mig),
            "instances": self.instances,
            "proc": str(self.proc_root or ""),
            "dev": str(self.dev_root or ""),
        }
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(state))
        os.replace(temporary, self.state_file)

    # -- faults -------------------------------------------------------------------------

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    # -- pynvml -------------------------------------------------------------------------

    def _ready(self) -> None:
        if self.fail:
            raise NVMLError(self.fail)
        if self.inits <= 0:
            raise NVMLError("Uninitialized")
        self._load()

    def _present(self) -> list[FakeGpu]:
        return [gpu for gpu in self.gpus if not gpu.lost]

    def nvmlInit(self) -> None:
        if self.fail:
            raise NVMLError(self.fail)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._ready()
        self.inits -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self._present())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._ready()
        present = self._present()
        if not 0 <= index < len(present):
            raise NVMLError("Invalid Argument")
        return present[index]

    def nvmlDeviceGetHandleByUUID(self, value: str | bytes) -> FakeGpu:
        self._ready()
        text = value.decode() if isinstance(value, bytes) else value
        for gpu in self._present():
            if gpu.uuid == text:
                return gpu
        raise NVMLError("Not Found")

    def _minor(self, handle: FakeGpu) -> int:
        return self.gpus.index(handle)

    def nvmlDeviceGetUUID(self, handle: FakeGpu | MigHandle) -> str:
        self._ready()
        if isinstance(handle, MigHandle):
            parent = self.gpus[handle.minor].uuid
            key = f"{parent}/{handle.gi}/{handle.ci}"
            return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, key))
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        self._ready()
        return handle.name

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> Any:
        self._ready()
        return SimpleNamespace(busId=f"00000000:{handle.bus.upper()}:00.0".encode())

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu | MigHandle) -> Any:
        self._ready()
        if isinstance(handle, MigHandle):
            gi = self.instances[str(handle.minor)][str(handle.gi)]
            total = _profile_by_id(gi["profile"]).memory_mib * (1 << 20)
        else:
            total = handle.memory
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        self._ready()
        return handle.capability

    def nvmlDeviceGetMinorNumber(self, handle: FakeGpu) -> int:
        self._ready()
        return self._minor(handle)

    def nvmlDeviceGetArchitecture(self, handle: FakeGpu) -> int:
        self._ready()
        return handle.architecture

    def nvmlDeviceGetNumaNodeId(self, handle: FakeGpu) -> int:
        self._ready()
        if not self.numa_supported:
            raise NVMLError("Not Supported")
        return handle.numa

    # -- MIG ------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        self._ready()
        mode = 1 if self._minor(handle) in self.mig else 0
        return [mode, mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: FakeGpu, profile: int, version: int = 2
    ) -> Any:
        self._ready()
        for known in H100_PROFILES:
            if known.index == profile:
                return SimpleNamespace(
                    id=known.id,
                    isP2pSupported=0,
                    sliceCount=known.compute_slices,
                    instanceCount=known.instances,
                    multiprocessorCount=known.multiprocessors,
                    copyEngineCount=known.copy_engines,
                    decoderCount=known.decoders,
                    encoderCount=0,
                    jpegCount=known.jpeg,
                    ofaCount=known.ofa,
                    memorySizeMB=known.memory_mib,
                    name=f"MIG {known.name}".encode(),
                )
        raise NVMLError("Not Supported")

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: FakeGpu, profile_id: int, placements: Any, count: Any
    ) -> int:
        self._ready()
        known = _profile_by_id(profile_id)
        for i, start in enumerate(known.starts):
            placements[i].start = start
            placements[i].size = known.memory_slices
        count._obj.value = len(known.starts)
        return 0

    def _gpu_instances(self, minor: int) -> dict[str, Any]:
        found: dict[str, Any] = self.instances.setdefault(str(minor), {})
        return found

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: FakeGpu, profile_id: int, placement: Any
    ) -> GpuInstance:
        self._ready()
        minor = self._minor(handle)
        if minor not in self.mig:
            raise NVMLError("Not Supported")
        known = _profile_by_id(profile_id)
        start, size = placement._obj.start, placement._obj.size
        if start not in known.starts or size != known.memory_slices:
            raise NVMLError("Invalid Argument")
        existing = self._gpu_instances(minor)
        taken = {
            s
            for gi in existing.values()
            for s in range(gi["start"], gi["start"] + _profile_by_id(gi["profile"]).memory_slices)
        }
        if taken & set(range(start, start + size)):
            raise NVMLError("Insufficient Resources")
        same = sum(1 for gi in existing.values() if gi["profile"] == profile_id)
        if same >= known.instances:
            raise NVMLError("Insufficient Resources")
        gi_id = next(i for i in range(1, 15) if str(i) not in existing)
        existing[str(gi_id)] = {"profile": profile_id, "start": start, "cis": []}
        self._capability(minor, f"gi{gi_id}", 1000 + minor * 200 + gi_id * 10)
        self.save()
        return GpuInstance(minor, gi_id)

    def nvmlDeviceGetGpuInstanceById(self, handle: FakeGpu, gi_id: int) -> GpuInstance:
        self._ready()
        minor = self._minor(handle)
        if str(gi_id) not in self._gpu_instances(minor):
            raise NVMLError("Not Found")
        return GpuInstance(minor, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: GpuInstance) -> Any:
        self._ready()
        found = self._gpu_instances(gi.minor).get(str(gi.id))
        if found is None:
            raise NVMLError("Not Found")
        size = _profile_by_id(found["profile"]).memory_slices
        return SimpleNamespace(
            device=self.gpus[gi.minor],
            id=gi.id,
            profileId=found["profile"],
            placement=SimpleNamespace(start=found["start"], size=size),
        )

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: GpuInstance, profile: int, engine_profile: int, version: int = 2
    ) -> Any:
        self._ready()
        found = self._gpu_instances(gi.minor).get(str(gi.id))
        if found is None:
            raise NVMLError("Not Found")
        slices = _profile_by_id(found["profile"]).compute_slices
        if CI_PROFILE_BY_SLICES.get(slices) != profile:
            raise NVMLError("Not Supported")
        return SimpleNamespace(id=profile, sliceCount=slices, instanceCount=1)

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi: GpuInstance, profile_id: int
    ) -> ComputeInstance:
        self._ready()
        found = self._gpu_instances(gi.minor).get(str(gi.id))
        if found is None:
            raise NVMLError("Not Found")
        if found["cis"]:
            raise NVMLError("Insufficient Resources")
        found["cis"].append(0)
        self._capability(gi.minor, f"gi{gi.id}/ci0", 1000 + gi.minor * 200 + gi.id * 10 + 1)
        self.save()
        return ComputeInstance(gi.minor, gi.id, 0)

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: GpuInstance, ci_id: int) -> Any:
        self._ready()
        found = self._gpu_instances(gi.minor).get(str(gi.id))
        if found is None or ci_id not in found["cis"]:
            raise NVMLError("Not Found")
        return ComputeInstance(gi.minor, gi.id, ci_id)

    def nvmlComputeInstanceGetInfo(self, ci: ComputeInstance) -> Any:
        self._ready()
        found = self._gpu_instances(ci.minor).get(str(ci.gi))
        if found is None or ci.id not in found["cis"]:
            raise NVMLError("Not Found")
        return SimpleNamespace(device=self.gpus[ci.minor], id=ci.id, profileId=0)

    def nvmlComputeInstanceDestroy(self, ci: ComputeInstance) -> int:
        self._ready()
        found = self._gpu_instances(ci.minor).get(str(ci.gi))
        if found is None or ci.id not in found["cis"]:
            raise NVMLError("Not Found")
        found["cis"].remove(ci.id)
        self._capability(ci.minor, f"gi{ci.gi}/ci{ci.id}", None)
        self.save()
        return 0

    def nvmlGpuInstanceDestroy(self, gi: GpuInstance) -> int:
        self._ready()
        existing = self._gpu_instances(gi.minor)
        found = existing.get(str(gi.id))
        if found is None:
            raise NVMLError("Not Found")
        if found["cis"]:
            raise NVMLError("In use by another client")
        del existing[str(gi.id)]
        self._capability(gi.minor, f"gi{gi.id}", None)
        self.save()
        return 0

    def _mig_handles(self, minor: int) -> list[MigHandle]:
        return [
            MigHandle(minor, int(gi_id), ci)
            for gi_id, gi in sorted(self._gpu_instances(minor).items(), key=lambda i: int(i[0]))
            for ci in gi["cis"]
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        self._ready()
        return 7 if self._minor(handle) in self.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> MigHandle:
        self._ready()
        handles = self._mig_handles(self._minor(handle))
        if not 0 <= index < len(handles):
            raise NVMLError("Not Found")
        return handles[index]

    def nvmlDeviceGetGpuInstanceId(self, handle: MigHandle) -> int:
        self._ready()
        return handle.gi

    def nvmlDeviceGetComputeInstanceId(self, handle: MigHandle) -> int:
        self._ready()
        return handle.ci

    # -- events ---------------------------------------------------------------------------

    def xid(self, index: int, code: int, *, gi: int | None = None, ci: int | None = None) -> None:
        """The GPU reports XID ``code`` (on a MIG device's instances when given)."""
        with self._lock:
            self.pending.append((index, code, gi, ci))

    def nvmlEventSetCreate(self) -> list[int]:
        self._ready()
        return []

    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, types: int, events: list[int]) -> None:
        self._ready()
        if types & 0x8:
            events.append(self._minor(handle))

    def nvmlEventSetWait(self, events: list[int], timeout_ms: int) -> Any:
        """Waits up to the timeout like NVML (not holding the fake's lock meanwhile)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            with self._lock:
                self._ready()
                for item in list(self.pending):
                    minor, code, gi, ci = item
                    if minor in events:
                        self.pending.remove(item)
                        none = 0xFFFFFFFF
                        return SimpleNamespace(
                            device=self.gpus[minor],
                            eventType=0x8,
                            eventData=code,
                            gpuInstanceId=none if gi is None else gi,
                            computeInstanceId=none if ci is None else ci,
                        )
            if time.monotonic() >= deadline:
                raise NVMLError("Timeout")
            time.sleep(0.01)

    def nvmlEventSetFree(self, events: list[int]) -> None:
        self._ready()

    # -- the kernel driver's side ---------------------------------------------------------

    def _capability(self, minor: int, path: str, cap_minor: int | None) -> None:
        """Write (or remove) an instance's capability file and its /dev/nvidia-caps node."""
        if self.proc_root is None:
            return
        folder = self.proc_root / f"driver/nvidia/capabilities/gpu{minor}/mig/{path}"
        access = folder / "access"
        if cap_minor is None:
            old = _cap_minor(access)
            access.unlink(missing_ok=True)
            if old is not None and self.dev_root is not None:
                (self.dev_root / f"dev/nvidia-caps/nvidia-cap{old}").unlink(missing_ok=True)
            return
        folder.mkdir(parents=True, exist_ok=True)
        access.write_text(f"DeviceFileMinor: {cap_minor}\nDeviceFileMode: 292\n")
        if self.dev_root is not None:
            node = self.dev_root / f"dev/nvidia-caps/nvidia-cap{cap_minor}"
            node.parent.mkdir(parents=True, exist_ok=True)
            if self.device_nodes:
                # /dev/null's numbers, as the crash and podman tests make the GPU nodes.
                node.unlink(missing_ok=True)
                os.mknod(node, stat.S_IFCHR | 0o666, os.stat("/dev/null").st_rdev)
            else:
                node.write_text("")


def _serialize_calls(cls: type[FakeNvml]) -> None:
    """Every NVML call holds the fake's lock, as NVML is safe to call from several
    threads: a call's load, change and save of the state file are one step."""
    for name in [n for n in vars(cls) if n.startswith("nvml") and n != "nvmlEventSetWait"]:
        method: Callable[..., Any] = getattr(cls, name)

        @functools.wraps(method)
        def call(self: FakeNvml, *args: Any, _method: Callable[..., Any] = method) -> Any:
            with self._lock:
                return _method(self, *args)

        setattr(cls, name, call)


_serialize_calls(FakeNvml)


def _profile_by_id(profile_id: int) -> GiProfile:
    for known in H100_PROFILES:
        if known.id == profile_id:
            return known
    raise NVMLError("Invalid Argument")


def _cap_minor(access: Path) -> int | None:
    try:
        text = access.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("DeviceFileMinor:"):
            return int(line.split(":", 1)[1])
    return None
