"""``dralet run --driver nvidia`` (entry point ``nvidia``).

Options (``--driver-option KEY=VALUE`` or the ``--driver-config`` YAML file)::

    devRoot: /          # --driver-option dev-root=/host: where the host's /dev is seen
    procRoot: /proc     # --driver-option proc-root=/host/proc: the host's /proc
    driverRoot: /       # --driver-option driver-root=/driver-root: the driver's files
    hostDriverRoot: ""  # --driver-option host-driver-root=/: the same, as the runtime sees it
    mig: existing       # --driver-option mig=dynamic: MIG devices made at prepare
    toolkitCdi: false   # --driver-option toolkit-cdi=true: use the toolkit's CDI spec
    nvmlLibrary: pynvml # --driver-option nvml-library=MODULE:NAME, another binding
    nvmlLibraryPath: "" # --driver-option nvml-library-path=FILE: libnvidia-ml.so.1 to load

``nvmlLibraryPath`` loads NVML from a file, e.g. the host's driver root mounted into
the driver's container (``/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1``);
pynvml then finds it loaded. Without it the library path of the process is searched.

Without ``toolkitCdi`` a prepared GPU also gets the driver's user-space libraries and
``nvidia-smi``, found under ``driverRoot`` (``dralet.drivers.nvidia.libraries``) and
mounted from ``hostDriverRoot`` (default: ``driverRoot``).

``toolkitCdi: true`` gives each device the NVIDIA Container Toolkit's CDI id
(``nvidia.com/gpu=<GPU or MIG UUID>``, from a spec made with ``nvidia-ctk cdi generate
--device-name-strategy=uuid``) besides dralet's own, which then holds only env: the
toolkit's spec brings the device nodes and the driver's user-space libraries. It cannot
name MIG devices made after it was generated, so it does not go with ``mig: dynamic``.

``mig: existing`` offers the MIG devices that exist on GPUs in MIG mode; ``mig: dynamic``
offers every placement of every profile as partitionable devices, makes the MIG device
at prepare and destroys it at release (it never changes a GPU's MIG mode).

NVML comes from ``nvidia-ml-py`` (``pip install 'dralet[nvidia]'``), which loads the
node's ``libnvidia-ml.so``; ``nvmlLibrary`` names any other object with pynvml's
functions (a class is instantiated without arguments).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.nvidia.backend import NvidiaGpus
from dralet.drivers.nvidia.nvml import Nvml

__all__ = ["factory", "nvidia_gpus"]

_KEYS = {
    "dev-root": "devRoot",
    "proc-root": "procRoot",
    "driver-root": "driverRoot",
    "host-driver-root": "hostDriverRoot",
    "mig": "mig",
    "toolkit-cdi": "toolkitCdi",
    "nvml-library": "nvmlLibrary",
    "nvml-library-path": "nvmlLibraryPath",
}


_ROOTS = {"devRoot": "/", "procRoot": "/proc", "driverRoot": "/"}


def _values(config: dralet.DriverConfig) -> dict[str, Any]:
    """The config file's settings, each overridden by its ``--driver-option``."""
    try:
        return config.settings(_KEYS)
    except ValueError as exc:
        raise dralet.DriverLoadError(f"nvidia: {exc}") from None


def nvidia_gpus(
    settings: dralet.Settings, config: dralet.DriverConfig, *, library: Any
) -> NvidiaGpus:
    """The backend over ``library`` (pynvml, or anything with its functions)."""
    values = _values(config)
    roots = {key: Path(str(values.get(key, default))) for key, default in _ROOTS.items()}
    roots["hostDriverRoot"] = Path(str(values.get("hostDriverRoot") or roots["driverRoot"]))
    for key, root in roots.items():
        if not root.is_absolute():
            raise dralet.DriverLoadError(f"nvidia: {key} {root}: must be an absolute path")
    mode = str(values.get("mig", "existing"))
    toolkit = str(values.get("toolkitCdi", False)).lower()
    if toolkit not in ("true", "false"):
        raise dralet.DriverLoadError(f"nvidia: toolkitCdi {toolkit}: expected true or false")
    if toolkit == "true" and mode == "dynamic":
        raise dralet.DriverLoadError(
            "nvidia: toolkitCdi with mig: dynamic: the toolkit's spec cannot name MIG devices "
            "made after it was generated"
        )
    try:
        return NvidiaGpus(
            Nvml(library),
            ledger_dir=settings.driver.plugin_dir,
            dev_root=roots["devRoot"],
            proc_root=roots["procRoot"],
            mig_mode=mode,
            toolkit_cdi=toolkit == "true",
            driver_root=roots["driverRoot"],
            host_driver_root=roots["hostDriverRoot"],
        )
    except ValueError as exc:  # the settings the backend itself refuses (mig)
        raise dralet.DriverLoadError(f"nvidia: {exc}") from None


def _library(target: str) -> Any:
    module_name, _, name = target.partition(":")
    try:
        library = getattr(importlib.import_module(module_name), name) if name else None
    except (ImportError, AttributeError) as exc:
        raise dralet.DriverLoadError(f"nvidia: nvmlLibrary {target}: {exc}") from None
    if library is None:
        raise dralet.DriverLoadError(f"nvidia: nvmlLibrary {target}: expected MODULE:NAME")
    return library() if isinstance(library, type) else library


def _preload(path: Path) -> None:
    """Load NVML from ``path``: pynvml's later ``dlopen("libnvidia-ml.so.1")`` finds the
    library already loaded under that soname."""
    import ctypes

    if not path.is_absolute():
        raise dralet.DriverLoadError(f"nvidia: nvmlLibraryPath {path}: must be an absolute path")
    try:
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise dralet.DriverLoadError(f"nvidia: nvmlLibraryPath {path}: {exc}") from None


def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> NvidiaGpus:
    """``dralet.BackendFactory`` of the NVIDIA driver."""
    values = _values(config)
    target = values.get("nvmlLibrary")
    library_path = values.get("nvmlLibraryPath")
    if library_path:
        _preload(Path(str(library_path)))
    if target:
        return nvidia_gpus(settings, config, library=_library(str(target)))
    try:
        import pynvml  # only the NVIDIA driver needs it
    except ImportError:
        raise dralet.DriverLoadError(
            "the nvidia driver needs nvidia-ml-py: pip install 'dralet[nvidia]'"
        ) from None
    return nvidia_gpus(settings, config, library=pynvml)
