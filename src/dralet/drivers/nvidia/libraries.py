"""The NVIDIA driver's user-space libraries and tools, found under the driver root and
mounted read-only into containers that get a GPU.

The libraries a CUDA program needs from the node's driver (``libcuda``, ``libnvidia-ml``
and the compiler and loader helpers the CUDA runtime opens) are found in the driver
root's library directories, under the driver's version (``libcuda.so.550.54.15``), and
mounted at ``/usr/local/nvidia/lib64`` under that name and their soname, read from the
file (``libcuda.so.1``, ``libnvidia-nvvm.so.4``): the directory NVIDIA's CUDA images
already have on their ``LD_LIBRARY_PATH``. ``nvidia-smi`` goes to ``/usr/local/nvidia/bin``.

``driver_root`` is where this process sees the driver's files; ``host_driver_root`` is
where the container runtime sees the same files (they differ when the driver runs in a
container with the host's driver root mounted elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dralet
from dralet.drivers.nvidia import elf

__all__ = [
    "COMPUTE_LIBRARIES",
    "CONTAINER_BIN",
    "CONTAINER_LIB",
    "DriverFiles",
    "find",
    "usable_version",
]

COMPUTE_LIBRARIES = (
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-opencl.so",
)
"""Libraries of the driver's compute stack, as their files start (``.<driver version>``
follows)."""
TOOLS = ("nvidia-smi", "nvidia-debugdump")
CONTAINER_LIB = "/usr/local/nvidia/lib64"
CONTAINER_BIN = "/usr/local/nvidia/bin"
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "lib/x86_64-linux-gnu",
    "lib64",
    "usr/lib/aarch64-linux-gnu",
    "lib/aarch64-linux-gnu",
)
BIN_DIRS = ("usr/bin", "bin")
_SONAME_VERSION = {
    "libcuda.so": "1",
    "libcudadebugger.so": "1",
    "libnvidia-ml.so": "1",
    "libnvidia-ptxjitcompiler.so": "1",
    "libnvidia-nvvm.so": "4",
    "libnvidia-allocator.so": "1",
    "libnvidia-cfg.so": "1",
    "libnvidia-opencl.so": "1",
}
"""The sonames' suffixes, as the driver's own files name them (``DT_SONAME``, read on
driver 580.159.04); only used for a file whose soname cannot be read. The others
(``libnvidia-gpucomp.so``) are ``<name>.<driver version>``."""
_READ_ONLY = ("ro", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class DriverFiles:
    """The mounts found for one driver version (empty when the root holds none)."""

    version: str
    mounts: tuple[dralet.Mount, ...]
    missing: tuple[str, ...]
    """Compute libraries not found (``libnvidia-ml.so`` missing means a broken root)."""


def _soname(found: Path, library: str, version: str) -> str:
    """The name ``found`` is loaded by: its own ``DT_SONAME`` (what the loader and
    ``libcuda``'s ``dlopen`` calls ask for), else the known one."""
    name = elf.soname(found)
    if name is not None and name.startswith(f"{library}."):
        return name
    return f"{library}.{_SONAME_VERSION.get(library, version)}"


def find(driver_root: Path, host_driver_root: Path, version: str) -> DriverFiles:
    """The driver's files of ``version`` under ``driver_root``, as mounts of the host's."""

    def host(path: Path) -> str:
        return str(host_driver_root / path.relative_to(driver_root))

    mounts: list[dralet.Mount] = []
    missing: list[str] = []
    for library in COMPUTE_LIBRARIES:
        found = _first(driver_root, LIBRARY_DIRS, f"{library}.{version}")
        if found is None:
            missing.append(library)
            continue
        for name in dict.fromkeys((found.name, _soname(found, library, version))):
            mounts.append(
                dralet.Mount(
                    host_path=host(found),
                    container_path=f"{CONTAINER_LIB}/{name}",
                    options=_READ_ONLY,
                )
            )
    for tool in TOOLS:
        found = _first(driver_root, BIN_DIRS, tool)
        if found is not None:
            mounts.append(
                dralet.Mount(
                    host_path=host(found),
                    container_path=f"{CONTAINER_BIN}/{tool}",
                    options=_READ_ONLY,
                )
            )
    return DriverFiles(version, tuple(mounts), tuple(missing))


def _first(root: Path, folders: Sequence[str], name: str) -> Path | None:
    for folder in folders:
        candidate = root / folder / name
        # The real file, not a link that could point outside the driver root.
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


_VERSION = re.compile(r"^\d+(\.\d+){1,2}$")


def usable_version(text: str) -> bool:
    """Whether NVML's driver version can name library files (``550.54.15``)."""
    return bool(_VERSION.match(text))
