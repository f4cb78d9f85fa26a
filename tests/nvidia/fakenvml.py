"""A pure-Python NVML with pynvml's function names, for the NVIDIA driver's tests.

It plays a DGX H100 by default: eight "NVIDIA H100 80GB HBM3" GPUs (Hopper, compute
capability 9.0, 81,559 MiB each), four on each NUMA node, at the PCI addresses such a
system has, driver 550.54.15. Faults: ``lose(index)`` makes a GPU vanish from
enumeration (what NVML shows after an XID 79, "GPU has fallen off the bus"), ``fail``
makes every call raise. Like NVML it must be initialised before use and counts nested
initialisations.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

H100_MEMORY = 81_559 * (1 << 20)
DGX_H100_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
ARCH_HOPPER = 9


class NVMLError(Exception):
    """pynvml's error type (its message is NVML's)."""


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
    NVMLError: type[Exception] = NVMLError

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

    # -- faults -------------------------------------------------------------------------

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    # -- pynvml -------------------------------------------------------------------------

    def _ready(self) -> None:
        if self.fail:
            raise NVMLError(self.fail)
        if self.inits <= 0:
            raise NVMLError("Uninitialized")

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

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._ready()
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        self._ready()
        return handle.name

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> Any:
        self._ready()
        return SimpleNamespace(busId=f"00000000:{handle.bus.upper()}:00.0".encode())

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        self._ready()
        return SimpleNamespace(total=handle.memory, free=handle.memory, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        self._ready()
        return handle.capability

    def nvmlDeviceGetMinorNumber(self, handle: FakeGpu) -> int:
        self._ready()
        return self.gpus.index(handle)

    def nvmlDeviceGetArchitecture(self, handle: FakeGpu) -> int:
        self._ready()
        return handle.architecture

    def nvmlDeviceGetNumaNodeId(self, handle: FakeGpu) -> int:
        self._ready()
        if not self.numa_supported:
            raise NVMLError("Not Supported")
        return handle.numa
