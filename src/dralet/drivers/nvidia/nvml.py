"""The NVML calls the NVIDIA driver makes, behind one narrow class.

``Nvml`` wraps a module with pynvml's functions: the real ``pynvml`` of ``nvidia-ml-py``
(NVIDIA's maintained binding) on a node, or a fake with the same names in tests. Names,
constants and return shapes are nvidia-ml-py 13.x's (``pynvml.py``): strings come back
decoded except ``nvmlPciInfo_t.busId``, which is bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["ARCHITECTURES", "Gpu", "Nvml", "NvmlError"]

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


class NvmlError(Exception):
    """An NVML call failed; the message names the call."""


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
