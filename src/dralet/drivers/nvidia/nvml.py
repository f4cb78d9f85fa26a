"""The NVML calls the NVIDIA driver makes, behind one narrow class.

``Nvml`` wraps a module with pynvml's functions: the real ``pynvml`` of ``nvidia-ml-py``
(NVIDIA's maintained binding) on a node, or a fake with the same names in tests. Names,
constants and return shapes are nvidia-ml-py 13.x's (``pynvml.py``): strings come back
decoded except ``nvmlPciInfo_t.busId``, which is bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARCHITECTURES",
    "Gpu",
    "GpuInstance",
    "MigDevice",
    "MigProfile",
    "Nvml",
    "NvmlError",
    "XidEvent",
]

ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
"""``NVML_DEVICE_ARCH_*`` values (nvidia-ml-py 13.615 ``pynvml.py``)."""


GPU_INSTANCE_PROFILES = range(0x12)
"""``NVML_GPU_INSTANCE_PROFILE_*`` indexes to ask a GPU about (0 .. COUNT-1)."""
COMPUTE_INSTANCE_PROFILE_BY_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 6: 0x6, 7: 0x4, 8: 0x5}
"""``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE``: the compute instance that spans a GPU
instance of ``n`` compute slices."""
_ENGINE_PROFILE_SHARED = 0x0
_INSTANCE_IDS = tuple(range(32))
"""GPU and compute instance ids probed (NVML numbers them from 0; fewer exist)."""
_MAX_PLACEMENTS = 16
EVENT_XID_CRITICAL = 0x8
"""``nvmlEventTypeXidCriticalError``."""
_NO_INSTANCE = 0xFFFFFFFF
_MIG_ENABLED = 1


class NvmlError(Exception):
    """An NVML call failed; the message names the call."""


class _Placement(ctypes.Structure):
    """``nvmlGpuInstancePlacement_t``: the first memory slice and how many."""

    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile a GPU in MIG mode offers (``nvmlGpuInstanceProfileInfo_v2``)."""

    name: str
    """NVIDIA's name without "MIG ": ``1g.10gb``, ``1g.10gb+me``, ``7g.80gb``."""
    id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    starts: tuple[int, ...]
    """The first memory slice of each placement NVML allows."""


@dataclass(frozen=True)
class GpuInstance:
    """A GPU instance: where it sits and the compute instances made in it."""

    id: int
    profile_id: int
    start: int
    compute_instances: tuple[int, ...]


@dataclass(frozen=True)
class MigDevice:
    """A MIG device: compute instance ``ci`` of GPU instance ``gi`` on a GPU."""

    uuid: str
    gi: int
    ci: int


@dataclass(frozen=True)
class XidEvent:
    """An XID error NVML reported for a GPU (and, on a MIG device, its instances)."""

    gpu_uuid: str
    xid: int
    gpu_instance: int | None
    compute_instance: int | None


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML describes it."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    minor_number: int
    architecture: str
    numa_node: int | None


def _absent(error: NvmlError) -> bool:
    """NVML's answer for an id no instance has (or one past the GPU's range)."""
    return "Not Found" in str(error) or "Invalid Argument" in str(error)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """NVML through ``library`` (a module or object with pynvml's functions)."""

    def __init__(self, library: Any) -> None:
        self._lib = library

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._lib, name)(*args)
        except self._lib.NVMLError as exc:
            raise NvmlError(f"{name}: {exc}") from None

    @contextlib.contextmanager
    def session(self) -> Iterator[Nvml]:
        """NVML initialised for the ``with`` block (NVML counts nested inits)."""
        self._call("nvmlInit")
        try:
            yield self
        finally:
            self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def gpus(self) -> list[Gpu]:
        """Every GPU NVML enumerates, in index order."""
        return [self._gpu(index) for index in range(int(self._call("nvmlDeviceGetCount")))]

    def _handle(self, gpu: Gpu) -> Any:
        return self._call("nvmlDeviceGetHandleByUUID", gpu.uuid)

    def mig_enabled(self, gpu: Gpu) -> bool:
        """Whether the GPU is in MIG mode now (a GPU without MIG support is not)."""
        try:
            current, _ = self._call("nvmlDeviceGetMigMode", self._handle(gpu))
        except NvmlError as exc:
            if "Not Supported" in str(exc):
                return False
            raise
        return int(current) == _MIG_ENABLED

    def mig_profiles(self, gpu: Gpu) -> list[MigProfile]:
        """The GPU-instance profiles the GPU offers, smallest first."""
        handle = self._handle(gpu)
        profiles = []
        for index in GPU_INSTANCE_PROFILES:
            try:
                info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
            except NvmlError:
                continue  # not offered by this GPU
            if not info.instanceCount:
                continue
            placements = (_Placement * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(_MAX_PLACEMENTS)
            self._call(
                "nvmlDeviceGetGpuInstancePossiblePlacements",
                handle,
                info.id,
                placements,
                ctypes.byref(count),
            )
            found = placements[: count.value]
            profiles.append(
                MigProfile(
                    name=_text(info.name).removeprefix("MIG ").strip(),
                    id=int(info.id),
                    compute_slices=int(info.sliceCount),
                    memory_slices=int(found[0].size) if found else 0,
                    memory_mib=int(info.memorySizeMB),
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                    starts=tuple(int(p.start) for p in found),
                )
            )
        return sorted(profiles, key=lambda p: (p.memory_slices, p.compute_slices, p.name))

    def mig_devices(self, gpu: Gpu) -> list[MigDevice]:
        """The MIG devices (compute instances) that exist on the GPU now; where each sits
        is its GPU instance's (``gpu_instances``)."""
        handle = self._handle(gpu)
        devices = []
        for index in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
            except NvmlError:
                continue  # no MIG device at this index
            devices.append(
                MigDevice(
                    uuid=_text(self._call("nvmlDeviceGetUUID", mig)),
                    gi=int(self._call("nvmlDeviceGetGpuInstanceId", mig)),
                    ci=int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
                )
            )
        return devices

    def gpu_instances(self, gpu: Gpu) -> list[GpuInstance]:
        """The GPU instances on the GPU now, with their compute instances: a GPU instance
        whose compute instance was never made is listed too (no MIG device shows it)."""
        handle = self._handle(gpu)
        found = []
        for gi_id in _INSTANCE_IDS:
            gi = self._instance(handle, gi_id)
            if gi is None:
                continue
            info = self._call("nvmlGpuInstanceGetInfo", gi)
            cis = tuple(ci for ci in _INSTANCE_IDS[:8] if self._compute(gi, ci) is not None)
            found.append(GpuInstance(gi_id, int(info.profileId), int(info.placement.start), cis))
        return found

    def _instance(self, handle: Any, gi_id: int) -> Any:
        try:
            return self._call("nvmlDeviceGetGpuInstanceById", handle, gi_id)
        except NvmlError as exc:
            if _absent(exc):
                return None
            raise

    def _compute(self, gi: Any, ci_id: int) -> Any:
        try:
            return self._call("nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
        except NvmlError as exc:
            if _absent(exc):
                return None
            raise

    def create_gpu_instance(self, gpu: Gpu, profile: MigProfile, start: int) -> int:
        """Create a GPU instance of ``profile`` at memory slice ``start``; its id."""
        placement = _Placement(start, profile.memory_slices)
        gi = self._call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            self._handle(gpu),
            profile.id,
            ctypes.byref(placement),
        )
        return int(self._call("nvmlGpuInstanceGetInfo", gi).id)

    def create_compute_instance(self, gpu: Gpu, gi_id: int, profile: MigProfile) -> int:
        """Create the compute instance that spans GPU instance ``gi_id``; its id."""
        ci_profile = COMPUTE_INSTANCE_PROFILE_BY_SLICES.get(profile.compute_slices)
        if ci_profile is None:
            raise NvmlError(f"no compute instance profile spans {profile.compute_slices} slices")
        gi = self._call("nvmlDeviceGetGpuInstanceById", self._handle(gpu), gi_id)
        info = self._call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, ci_profile, _ENGINE_PROFILE_SHARED
        )
        ci = self._call("nvmlGpuInstanceCreateComputeInstance", gi, info.id)
        return int(self._call("nvmlComputeInstanceGetInfo", ci).id)

    def destroy_gpu_instance(self, gpu: Gpu, gi_id: int) -> bool:
        """Destroy GPU instance ``gi_id`` and its compute instances first; False when it
        is already gone (destroying is idempotent)."""
        gi = self._instance(self._handle(gpu), gi_id)
        if gi is None:
            return False
        for ci_id in _INSTANCE_IDS[:8]:
            ci = self._compute(gi, ci_id)
            if ci is not None:
                self._call("nvmlComputeInstanceDestroy", ci)
        self._call("nvmlGpuInstanceDestroy", gi)
        return True

    def xid_events(self, gpus: list[Gpu]) -> Any:
        """An NVML event set on which every GPU that supports it reports XID errors."""
        events = self._call("nvmlEventSetCreate")
        for gpu in gpus:
            try:
                self._call(
                    "nvmlDeviceRegisterEvents", self._handle(gpu), EVENT_XID_CRITICAL, events
                )
            except NvmlError as exc:
                if "Not Supported" not in str(exc):
                    raise
        return events

    def wait_xid(self, events: Any, timeout_ms: int) -> XidEvent | None:
        """The next XID error of ``events``, or None when none came within the timeout."""
        try:
            data = self._call("nvmlEventSetWait", events, timeout_ms)
        except NvmlError as exc:
            if "Timeout" in str(exc):
                return None
            raise
        if int(data.eventType) != EVENT_XID_CRITICAL:
            return None
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return XidEvent(
            gpu_uuid=_text(self._call("nvmlDeviceGetUUID", data.device)),
            xid=int(data.eventData),
            gpu_instance=None if gi == _NO_INSTANCE else gi,
            compute_instance=None if ci == _NO_INSTANCE else ci,
        )

    def free_events(self, events: Any) -> None:
        self._call("nvmlEventSetFree", events)

    def _gpu(self, index: int) -> Gpu:
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", handle)
        architecture = self._call("nvmlDeviceGetArchitecture", handle)
        try:
            numa: int | None = int(self._call("nvmlDeviceGetNumaNodeId", handle))
        except NvmlError:
            numa = None  # not supported on this GPU or driver
        return Gpu(
            index=index,
            uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
            name=_text(self._call("nvmlDeviceGetName", handle)),
            pci_bus_id=_text(self._call("nvmlDeviceGetPciInfo", handle).busId),
            memory_bytes=int(self._call("nvmlDeviceGetMemoryInfo", handle).total),
            compute_capability=(int(major), int(minor)),
            minor_number=int(self._call("nvmlDeviceGetMinorNumber", handle)),
            architecture=ARCHITECTURES.get(int(architecture), "Unknown"),
            numa_node=numa if numa is not None and numa >= 0 else None,
        )
