"""What a crash run drives: the driver process to start and the hardware truth to judge it by.

A target names the ``dralet run --driver`` selection and its configuration, makes the
(simulated or test-made) hardware a run needs, and says which claim the hardware holds
each device for, independently of the driver's own answers:

- ``example``: the simulated GPUs (their state file), every other round behind the
  strict backend, whose broken-promise log is a violation.
- ``hostdev``: device nodes made with mknod for the run, served by the hostdev driver.
  It has no hardware state: what it holds comes from dralet's records (read without
  the driver), so the run's own checks (a claim the kubelet unprepared is gone, no
  device prepared for two claims) judge the records and the CDI specs; the nodes
  themselves must come out of every run untouched.
- ``nvidia``: the NVIDIA driver over the tests' fake NVML (a DGX H100) and device nodes
  made with mknod under NVIDIA's names; like hostdev it holds nothing in hardware, so
  the records and specs are judged, and the nodes must come out untouched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from dralet.checkpoint import database
from dralet.drivers.example import SimulatedGPUs
from dralet.drivers.hostdev import HostDevices, load_config
from dralet.drivers.nvidia.backend import NvidiaGpus
from dralet.drivers.nvidia.nvml import Nvml
from dralet.node.claims.calls import held_devices
from dralet.node.settings import DriverSettings
from dralet.testing.strict import StrictBackend

__all__ = [
    "TARGETS",
    "CrashTarget",
    "ExampleTarget",
    "HostdevTarget",
    "NvidiaMigTarget",
    "NvidiaTarget",
]

REPO = Path(__file__).resolve().parent.parent.parent
FAKE_NVML = "tests.nvidia.fakenvml:FakeNvml"


class CrashTarget(Protocol):
    driver_name: ClassVar[str]
    supports_strict: ClassVar[bool]

    def setup(self, root: Path, devices: int) -> list[str]:
        """Make the hardware; the device names a scheduler may allocate."""
        ...

    def driver_args(self, root: Path) -> list[str]:
        """``--driver NAME`` and any ``--driver-config FILE`` for ``dralet run``."""
        ...

    def env(self, root: Path) -> dict[str, str]:
        """Environment of the driver process."""
        ...

    def backend(self, root: Path) -> Any:
        """An object whose ``devices_in_use()`` reads the hardware (for the audit)."""
        ...

    def in_use(self, root: Path) -> dict[str, str]:
        """Device → the claim UID the hardware holds it for."""
        ...

    def violations(self, root: Path) -> list[str]:
        """Broken promises only this target can see."""
        ...


def _told_the_records(backend: Any, settings: DriverSettings) -> Any:
    """``backend`` told what dralet's records hold now (read without the driver), as the
    driver tells it at start: where the hardware keeps nothing, that is what it holds."""
    records = database.read_only_snapshot(settings.store_path, settings.checkpoint_path)
    backend.restore_held(held_devices(records.checkpoint))
    return backend


def _one_holder(in_use: Mapping[str, str | Collection[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for device, holders in in_use.items():
        out[device] = holders if isinstance(holders, str) else ",".join(sorted(holders))
    return out


class ExampleTarget:
    driver_name: ClassVar[str] = "gpu.example.com"
    supports_strict: ClassVar[bool] = True

    def __init__(self, settings: DriverSettings, *, strict: bool) -> None:
        self.settings = settings
        self.strict = strict
        self._gpus: SimulatedGPUs | None = None

    def setup(self, root: Path, devices: int) -> list[str]:
        assert self.settings.backend_state_dir is not None
        self._gpus = SimulatedGPUs(
            state_dir=self.settings.backend_state_dir,
            node_name=self.settings.node_name,
            count=devices,
        )
        return [f"gpu-{i}" for i in range(devices)]

    def driver_args(self, root: Path) -> list[str]:
        return ["--driver", "example-strict" if self.strict else "example"]

    def env(self, root: Path) -> dict[str, str]:
        return {}

    def backend(self, root: Path) -> SimulatedGPUs:
        assert self._gpus is not None
        return self._gpus

    def in_use(self, root: Path) -> dict[str, str]:
        return self.backend(root).in_use()

    def violations(self, root: Path) -> list[str]:
        assert self.settings.backend_state_dir is not None
        return [
            f"strict backend: {broken}"
            for broken in StrictBackend.violations_in(self.settings.backend_state_dir / "strict")
        ]


class HostdevTarget:
    driver_name: ClassVar[str] = "hostdev.example.com"
    supports_strict: ClassVar[bool] = False
    NUMBERS: ClassVar[tuple[tuple[int, int], ...]] = ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9))
    """Harmless kernel devices (null, zero, full, random, urandom): a node of each."""

    def __init__(self, settings: DriverSettings, *, strict: bool = False) -> None:
        self.settings = settings
        self._nodes: dict[Path, tuple[int, int, int]] = {}

    def _config(self, root: Path) -> Path:
        return root / "hostdev.yaml"

    def setup(self, root: Path, devices: int) -> list[str]:
        if devices > len(self.NUMBERS):
            raise ValueError(f"hostdev crash runs make at most {len(self.NUMBERS)} nodes")
        dev = root / "hostdev" / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        (root / "hostdev" / "sys").mkdir(exist_ok=True)
        for index, (major, minor) in enumerate(self.NUMBERS[:devices]):
            path = dev / f"n{index}"
            os.mknod(path, stat.S_IFCHR | 0o640, os.makedev(major, minor))
            self._nodes[path] = (major, minor, stat.S_IFCHR | 0o640)
        self._config(root).write_text(
            f"sysfsRoot: {root / 'hostdev' / 'sys'}\nudevDataDir: {root / 'hostdev' / 'udev'}\n"
            f"groups:\n  - name: hd\n    match: {{paths: ['{dev}/n*'], type: char}}\n"
            "    naming: [path]\n    containerPath: /dev/hd/{basename}\n"
        )
        return [f"hd-n{i}" for i in range(devices)]

    def driver_args(self, root: Path) -> list[str]:
        return ["--driver", "hostdev", "--driver-config", str(self._config(root))]

    def env(self, root: Path) -> dict[str, str]:
        return {}

    def backend(self, root: Path) -> HostDevices:
        return HostDevices(load_config(self._config(root).read_text()))

    def in_use(self, root: Path) -> dict[str, str]:
        return _one_holder(_told_the_records(self.backend(root), self.settings).devices_in_use())

    def violations(self, root: Path) -> list[str]:
        broken: list[str] = []
        for path, (major, minor, mode) in self._nodes.items():
            info = os.lstat(path)
            if (os.major(info.st_rdev), os.minor(info.st_rdev), info.st_mode) != (
                major,
                minor,
                mode,
            ):
                broken.append(f"the driver changed device node {path}")
        return broken


class NvidiaTarget:
    driver_name: ClassVar[str] = "gpu.nvidia.com"
    supports_strict: ClassVar[bool] = False
    NODES: ClassVar[tuple[str, ...]] = (
        *(f"nvidia{i}" for i in range(8)),
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
    )
    """The nodes of the fake NVML's eight GPUs and the control nodes, all /dev/null's
    numbers (harmless if a container ever opened one)."""

    def __init__(self, settings: DriverSettings, *, strict: bool = False) -> None:
        self.settings = settings
        self._nodes: dict[Path, tuple[int, int]] = {}

    def _root(self, root: Path) -> Path:
        return root / "nvidia"

    def setup(self, root: Path, devices: int) -> list[str]:
        if devices > 8:
            raise ValueError("nvidia crash runs play a DGX H100: at most 8 GPUs")
        dev = self._root(root) / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        null = os.stat("/dev/null").st_rdev
        for name in self.NODES:
            os.mknod(dev / name, stat.S_IFCHR | 0o640, null)
            self._nodes[dev / name] = (null, stat.S_IFCHR | 0o640)
        return [f"gpu-{i}" for i in range(devices)]

    def driver_args(self, root: Path) -> list[str]:
        return [
            *("--driver", "nvidia"),
            *("--driver-option", f"dev-root={self._root(root)}"),
            *("--driver-option", f"nvml-library={FAKE_NVML}"),
        ]

    def env(self, root: Path) -> dict[str, str]:
        return {"PYTHONPATH": str(REPO)}

    def backend(self, root: Path) -> NvidiaGpus:
        from tests.nvidia.fakenvml import FakeNvml

        return NvidiaGpus(
            Nvml(FakeNvml()), ledger_dir=self.settings.plugin_dir, dev_root=self._root(root)
        )

    def in_use(self, root: Path) -> dict[str, str]:
        return _one_holder(_told_the_records(self.backend(root), self.settings).devices_in_use())

    def violations(self, root: Path) -> list[str]:
        return [
            f"the driver changed device node {path}"
            for path, (rdev, mode) in self._nodes.items()
            if (os.lstat(path).st_rdev, os.lstat(path).st_mode) != (rdev, mode)
        ]


class NvidiaMigTarget(NvidiaTarget):
    """GPU 0 in MIG mode, partitions made at prepare (``mig=dynamic``): the fake NVML keeps
    its instances in a file, so a killed driver leaves them as hardware would, and every
    instance left must be one the driver's ledger names."""

    PLACEMENTS: ClassVar[int] = 7

    def setup(self, root: Path, devices: int) -> list[str]:
        from tests.nvidia.fakenvml import FakeNvml

        if devices > self.PLACEMENTS:
            raise ValueError(f"nvidia-mig crash runs use at most {self.PLACEMENTS} placements")
        super().setup(root, 8)
        base = self._root(root)
        FakeNvml(
            mig={0}, state_file=self._state(root), proc_root=base / "proc", dev_root=base
        ).save()
        return [f"gpu-0-mig-1g-10gb-{i}" for i in range(devices)]

    def _state(self, root: Path) -> Path:
        return self._root(root) / "nvml-state.json"

    def driver_args(self, root: Path) -> list[str]:
        return [
            *super().driver_args(root),
            *("--driver-option", f"proc-root={self._root(root) / 'proc'}"),
            *("--driver-option", "mig=dynamic"),
        ]

    def env(self, root: Path) -> dict[str, str]:
        return {**super().env(root), "FAKE_NVML_STATE": str(self._state(root))}

    def backend(self, root: Path) -> NvidiaGpus:
        from tests.nvidia.fakenvml import FakeNvml

        return NvidiaGpus(
            Nvml(FakeNvml(state_file=self._state(root))),
            ledger_dir=self.settings.plugin_dir,
            dev_root=self._root(root),
            proc_root=self._root(root) / "proc",
            mig_mode="dynamic",
        )

    def violations(self, root: Path) -> list[str]:
        from tests.nvidia.fakenvml import FakeNvml

        broken = super().violations(root)
        gpus = self.backend(root)
        ours = gpus.ledger.read()
        made = FakeNvml(state_file=self._state(root)).instances.get("0", {})
        for gi_id, gi in made.items():
            name = f"gpu-0-mig-1g-10gb-{gi['start']}"
            if name not in ours:
                broken.append(f"MIG instance {gi_id} ({name}) exists, but no ledger entry names it")
        return broken


TARGETS: dict[
    str, type[ExampleTarget] | type[HostdevTarget] | type[NvidiaTarget] | type[NvidiaMigTarget]
] = {
    "example": ExampleTarget,
    "hostdev": HostdevTarget,
    "nvidia": NvidiaTarget,
    "nvidia-mig": NvidiaMigTarget,
}
