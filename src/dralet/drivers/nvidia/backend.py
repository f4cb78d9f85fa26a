"""NVIDIA GPUs as DRA devices: whole GPUs, and MIG devices of the GPUs in MIG mode.

A whole GPU is published as ``gpu-<minor>``, named by its device node's minor number,
which stays when another GPU falls off the bus (NVML's indexes shift then), with what a
user selects on (``productName``, ``architecture``, ``cudaComputeCapability`` and
``driverVersion`` as versions, ``uuid``, ``pciBusID``, ``numaNode``, ``index``) and its
``memory`` as capacity. A GPU in MIG mode is published as MIG devices instead
(``dralet.drivers.nvidia.mig``): the ones that exist, or with ``mig: dynamic`` every
placement, made at prepare and destroyed at release.

Preparing gives the container the GPU's device node ``/dev/nvidia<minor>``, the driver's
control nodes the host has (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset``) and, for a MIG device, the
``/dev/nvidia-caps`` nodes of its GPU and compute instance, read from
``/proc/driver/nvidia/capabilities``. Whole GPUs and existing MIG devices change nothing
on the host, so releasing them undoes nothing and ``devices_in_use`` comes from
dralet's own claim records, as for hostdev (``dralet.drivers.held``); MIG devices
dralet made are also in its ledger.

The driver's user-space libraries and ``nvidia-smi`` are mounted from the driver root
(``dralet.drivers.nvidia.libraries``), or, with ``toolkit_cdi``, come from the NVIDIA
Container Toolkit's CDI spec, whose id each device then also gets.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.held import HeldDevices
from dralet.drivers.nvidia import libraries, mig, xids
from dralet.drivers.nvidia.nvml import Gpu, MigProfile, Nvml, NvmlError

__all__ = ["CONTROL_NODES", "TOOLKIT_CDI_KIND", "NvidiaGpus", "semantic_version"]

log = logging.getLogger(__name__)

CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
"""The driver's device nodes every CUDA process opens besides its GPU's (the ones a
host lacks, e.g. nvidia-modeset on a headless node, are left out)."""
TOOLKIT_CDI_KIND = "nvidia.com/gpu"
"""The kind of the NVIDIA Container Toolkit's spec (``nvidia-ctk cdi generate
--device-name-strategy=uuid`` names its devices by GPU and MIG UUID)."""
_VERSION_PARTS = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")
_CAPABILITIES = "driver/nvidia/capabilities"
_CAP_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)


def semantic_version(text: str) -> dralet.Version | None:
    """A driver version (``550.54.15``, ``535.104.05``, ``560.28``) as strict semver
    (``535.104.5``, ``560.28.0``): leading zeros dropped, missing parts 0."""
    match = _VERSION_PARTS.match(text.strip())
    if match is None:
        return None
    parts = [int(part or 0) for part in match.groups()]
    return dralet.Version(".".join(map(str, parts)))


def _name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor_number}"


def _memory(total: int) -> str:
    mib = 1 << 20
    return f"{total // mib}Mi" if total % mib == 0 else str(total)


@dataclass(frozen=True)
class _Inventory:
    """What NVML shows now: whole GPUs and MIG placements, by device name."""

    driver: dralet.Version | None
    driver_text: str
    """The version as NVML spells it (``535.104.05``): the libraries' file names."""
    whole: dict[str, Gpu]
    placements: dict[str, mig.Placement]
    mig_gpus: dict[str, tuple[Gpu, tuple[MigProfile, ...]]]
    """Counter set name → the GPU in MIG mode and its profiles."""


class NvidiaGpus:
    """A ``dralet.ClaimBackend`` over the GPUs of ``nvml``; device nodes under
    ``dev_root`` and capability files under ``proc_root`` (``/`` on a node; the host's
    root where the driver sees it elsewhere). ``ledger_dir`` keeps the MIG ledger
    (``mig.LEDGER_NAME``): the MIG devices dralet made, and for which claim."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        ledger_dir: Path,
        dev_root: Path = Path("/"),
        proc_root: Path = Path("/proc"),
        mig_mode: str = "existing",
        toolkit_cdi: bool = False,
        driver_root: Path = Path("/"),
        host_driver_root: Path | None = None,
    ) -> None:
        if mig_mode not in mig.MIG_MODES:
            raise ValueError(f"mig {mig_mode}: expected one of {', '.join(mig.MIG_MODES)}")
        self.nvml = nvml
        self.dev_root = dev_root
        self.proc_root = proc_root
        self.mig_mode = mig_mode
        self.toolkit_cdi = toolkit_cdi
        """Device nodes and libraries come from the NVIDIA Container Toolkit's own CDI
        spec (``nvidia.com/gpu=<uuid>``); dralet's spec for the device holds only env."""
        self.driver_root = driver_root
        self.host_driver_root = host_driver_root or driver_root
        self._driver_files: libraries.DriverFiles | None = None
        self._profiles: dict[str, tuple[MigProfile, ...]] = {}
        """GPU UUID → its MIG profiles, read once (they are fixed while MIG is on)."""
        self.held = HeldDevices()
        self.ledger = mig.MigLedger(ledger_dir / mig.LEDGER_NAME)
        self.xids = xids.XidWatch(nvml)
        self._reported = ""
        """The last NVML failure logged (each new one is logged once)."""

    # ------------------------------------------------------------------ discovery

    def gpus(self) -> dict[str, Gpu]:
        """The GPUs NVML enumerates now, by whole-GPU device name."""
        with self.nvml.session() as nvml:
            return {_name(gpu): gpu for gpu in nvml.gpus()}

    def _inventory(self, *, instances: bool = True) -> _Inventory:
        """The devices NVML shows now; without ``instances`` the MIG placements are named
        but not looked up (health and counters need only the names)."""
        with self.nvml.session() as nvml:
            driver_text = nvml.driver_version()
            driver = semantic_version(driver_text)
            whole: dict[str, Gpu] = {}
            placements: dict[str, mig.Placement] = {}
            mig_gpus: dict[str, tuple[Gpu, tuple[MigProfile, ...]]] = {}
            for gpu in nvml.gpus():
                if not nvml.mig_enabled(gpu):
                    whole[_name(gpu)] = gpu
                    continue
                profiles = self._profiles.get(gpu.uuid)
                if profiles is None:
                    profiles = self._profiles[gpu.uuid] = tuple(nvml.mig_profiles(gpu))
                made = (nvml.gpu_instances(gpu), nvml.mig_devices(gpu)) if instances else ((), ())
                placements.update(mig.placements(gpu, profiles, *made))
                mig_gpus[mig.counter_set_name(gpu)] = (gpu, profiles)
        return _Inventory(driver, driver_text, whole, placements, mig_gpus)

    def _host(self, path: str) -> Path:
        return self.dev_root / path.lstrip("/")

    # ------------------------------------------------------------------ ClaimBackend

    def devices(self) -> list[dralet.Device]:
        inventory = self._inventory()
        devices = [
            self._whole_device(name, gpu, inventory.driver) for name, gpu in inventory.whole.items()
        ]
        ours = self.ledger.read() if self.mig_mode == "dynamic" else {}
        for name, placement in inventory.placements.items():
            if self.mig_mode == "existing" and placement.present is None:
                continue
            devices.append(self._mig_device(name, placement, inventory.driver, ours))
        return devices

    def counter_sets(self) -> list[dralet.CounterSet]:
        """One set per GPU in MIG mode when placements are made on demand."""
        if self.mig_mode != "dynamic":
            return []
        return [
            mig.counter_set(gpu, profiles)
            for gpu, profiles in self._inventory(instances=False).mig_gpus.values()
        ]

    @staticmethod
    def _gpu_attributes(gpu: Gpu, driver: dralet.Version | None) -> dict[str, Any]:
        major, minor = gpu.compute_capability
        attributes: dict[str, dralet.AttributeValue] = {
            "productName": gpu.name,
            "architecture": gpu.architecture,
            "cudaComputeCapability": dralet.Version(f"{major}.{minor}.0"),
            "pciBusID": gpu.pci_bus_id.lower(),
            "index": gpu.index,
            "minor": gpu.minor_number,
        }
        if driver is not None:
            attributes["driverVersion"] = driver
        if gpu.numa_node is not None:
            attributes["numaNode"] = gpu.numa_node
        return attributes

    def _whole_device(self, name: str, gpu: Gpu, driver: dralet.Version | None) -> dralet.Device:
        attributes = {"type": "gpu", "uuid": gpu.uuid, **self._gpu_attributes(gpu, driver)}
        return dralet.Device(
            name=name, attributes=attributes, capacity={"memory": _memory(gpu.memory_bytes)}
        )

    def _mig_device(
        self,
        name: str,
        placement: mig.Placement,
        driver: dralet.Version | None,
        ours: Mapping[str, Any],
    ) -> dralet.Device:
        attributes = {
            "type": "mig",
            "profile": placement.profile.name,
            "parentUUID": placement.gpu.uuid,
            "placementStart": placement.start,
            **self._gpu_attributes(placement.gpu, driver),
        }
        if placement.present is not None:
            attributes["uuid"] = placement.present.uuid
        dynamic = self.mig_mode == "dynamic"
        # A MIG device someone else made stays offered where the cluster cannot count
        # counters; the placements dralet makes are partitions only.
        partition = dynamic and (placement.present is None or name in ours)
        return dralet.Device(
            name=name,
            attributes=attributes,
            capacity=mig.capacity(placement.profile),
            consumes_counters=(
                (mig.consumption(placement.gpu, placement.profile, placement.start),)
                if dynamic
                else ()
            ),
            partition=partition,
        )

    def _library_mounts(self, version: str) -> tuple[dralet.Mount, ...]:
        """The driver's libraries and tools of ``version`` (looked up once per version)."""
        known = self._driver_files
        if known is None or known.version != version:
            if not libraries.usable_version(version):
                return ()
            known = libraries.find(self.driver_root, self.host_driver_root, version)
            self._driver_files = known
            if "libnvidia-ml.so" in known.missing:
                log.warning(
                    "nvidia: no driver %s libraries under %s; containers must bring their own",
                    version,
                    self.driver_root,
                )
        return known.mounts

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        inventory = self._inventory()
        controls = [p for p in CONTROL_NODES if self._host(p).exists()]
        mounts = () if self.toolkit_cdi else self._library_mounts(inventory.driver_text)
        uid = allocation.claim.uid
        prepared = []
        for allocated in allocation.devices:
            name = allocated.device
            gpu = inventory.whole.get(name)
            placement = inventory.placements.get(name)
            if gpu is None and placement is None:
                raise dralet.ClaimError(uid, f"GPU {name} is not on this node now")
            if placement is not None:
                gpu = placement.gpu
                state, caps = self._prepare_mig(uid, name, placement)
            else:
                assert gpu is not None
                state, caps = {"uuid": gpu.uuid, "minor": gpu.minor_number}, []
            visible = state.get("migUUID", gpu.uuid)
            env = (f"DRALET_NVIDIA_GPU_{gpu.minor_number}={visible}",)
            if self.toolkit_cdi:
                prepared.append(
                    dralet.PreparedDevice(
                        edits=dralet.ContainerEdits(env=env),
                        state=state,
                        external_cdi_ids=(f"{TOOLKIT_CDI_KIND}={visible}",),
                    )
                )
                continue
            node = f"/dev/nvidia{gpu.minor_number}"
            if not self._host(node).exists():
                raise dralet.ClaimError(uid, f"GPU {name}: {self._host(node)} is missing")
            nodes = tuple(
                dralet.DeviceNode(path=path, host_path=str(self._host(path)))
                for path in (node, *controls, *caps)
            )
            prepared.append(
                dralet.PreparedDevice(
                    edits=dralet.ContainerEdits(device_nodes=nodes, env=env, mounts=mounts),
                    state=state,
                )
            )
        self.held.prepared(allocation, prepared)
        return prepared

    # ------------------------------------------------------------------ MIG

    def _prepare_mig(
        self, uid: str, name: str, placement: mig.Placement
    ) -> tuple[dict[str, Any], list[str]]:
        """Make (or find again, or finish) the MIG device; its state and capability nodes.

        The ledger names the claim before NVML is asked for anything, so whatever a kill
        leaves (a GPU instance without its compute instance, or both) is found again here
        or by release."""
        try:
            entry = self.ledger.read().get(name)
        except mig.LedgerError as exc:
            raise dralet.ClaimError(uid, f"MIG device {name}: {exc}") from None
        if entry is not None and entry.get("claim") != uid:
            raise dralet.ClaimError(
                uid, f"MIG device {name} was made for claim {entry.get('claim')}"
            )
        instance, present = placement.instance, placement.present
        ours = entry is not None
        if instance is None:
            if self.mig_mode != "dynamic":
                raise dralet.ClaimError(uid, f"MIG device {name} is not on this node now")
            self.ledger.put(name, {"claim": uid, "gpu": placement.gpu.uuid})
            ours = True
            try:
                with self.nvml.session() as nvml:
                    gi = nvml.create_gpu_instance(placement.gpu, placement.profile, placement.start)
            except NvmlError as exc:
                self.ledger.remove(name)
                raise dralet.ClaimError(uid, f"MIG device {name}: {exc}") from None
            self.ledger.put(name, {"claim": uid, "gpu": placement.gpu.uuid, "gi": gi})
        else:
            gi = instance.id
        if present is None:
            if not ours:
                raise dralet.ClaimError(
                    uid, f"MIG device {name}: GPU instance {gi} has no compute instance"
                )
            try:
                with self.nvml.session() as nvml:
                    ci = nvml.create_compute_instance(placement.gpu, gi, placement.profile)
                    present = next(
                        (d for d in nvml.mig_devices(placement.gpu) if (d.gi, d.ci) == (gi, ci)),
                        None,
                    )
            except NvmlError as exc:
                raise dralet.ClaimError(uid, f"MIG device {name}: {exc}") from None
            if present is None:
                raise dralet.ClaimError(uid, f"MIG device {name}: made, but NVML does not list it")
        caps = self._capability_nodes(uid, name, placement.gpu, present.gi, present.ci)
        state = {
            "uuid": placement.gpu.uuid,
            "minor": placement.gpu.minor_number,
            "migUUID": present.uuid,
            "gi": present.gi,
            "ci": present.ci,
            "made": ours,
        }
        return state, caps

    def _capability_nodes(self, uid: str, name: str, gpu: Gpu, gi: int, ci: int) -> list[str]:
        """The /dev/nvidia-caps nodes of the GPU instance and the compute instance."""
        base = self.proc_root / _CAPABILITIES / f"gpu{gpu.minor_number}" / "mig" / f"gi{gi}"
        nodes = []
        for access in (base / "access", base / f"ci{ci}" / "access"):
            try:
                found = _CAP_MINOR.search(access.read_text())
            except OSError as exc:
                raise dralet.ClaimError(uid, f"MIG device {name}: {access}: {exc}") from None
            if found is None:
                raise dralet.ClaimError(uid, f"MIG device {name}: {access} names no minor")
            node = f"/dev/nvidia-caps/nvidia-cap{found.group(1)}"
            if not self._host(node).exists():
                raise dralet.ClaimError(uid, f"MIG device {name}: {self._host(node)} is missing")
            nodes.append(node)
        return nodes

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Destroy the MIG devices dralet made for the claim (found by the ledger, so a
        release after a crash that lost the state still finds them); nothing else."""
        self.held.released(allocation)
        ours = self.ledger.read()
        for allocated in allocation.devices:
            entry = ours.get(allocated.device)
            if entry is None or entry.get("claim") != allocation.claim.uid:
                continue
            self._destroy(allocated.device, entry)

    def _destroy(self, name: str, entry: Mapping[str, Any]) -> None:
        """Destroy the GPU instance the ledger entry names (by its id, or where it sits
        when a kill came before the id was written), then forget the entry."""
        with self.nvml.session() as nvml:
            gpu = next((g for g in nvml.gpus() if g.uuid == entry.get("gpu")), None)
            if gpu is not None:
                gi = entry.get("gi")
                if gi is None:
                    placement = mig.placements(
                        gpu, nvml.mig_profiles(gpu), nvml.gpu_instances(gpu), ()
                    ).get(name)
                    gi = placement.instance.id if placement and placement.instance else None
                if gi is not None:
                    nvml.destroy_gpu_instance(gpu, int(gi))
        self.ledger.remove(name)

    def devices_in_use(self) -> dict[str, str | Collection[str]]:
        """From dralet's claim records, and the MIG devices its ledger says it made."""
        in_use = self.held.devices_in_use()
        for name, entry in self.ledger.read().items():
            in_use.setdefault(name, str(entry.get("claim")))
        return in_use

    def restore_held(self, held: Sequence[dralet.HeldDevice]) -> None:
        """What dralet's claim records hold, told at start."""
        self.held.restore(held)

    def survives_reboot(self, device: dralet.AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """Still prepared when the same GPU (UUID) answers to the same device name, and a
        MIG device is still there (MIG devices do not outlive a reboot on their own)."""
        if "migUUID" in state:
            try:
                placement = self._inventory().placements.get(device.device)
            except NvmlError:
                return False
            return (
                placement is not None
                and placement.present is not None
                and (placement.present.uuid == state.get("migUUID"))
            )
        gpu = self.gpus().get(device.device)
        return gpu is not None and gpu.uuid == state.get("uuid")

    def health(self) -> dict[str, dralet.DeviceHealth]:
        """Healthy while NVML enumerates its GPU and no XID said it is broken; a held
        device whose GPU is gone (or replaced) is not."""
        self.xids.start()
        try:
            inventory = self._inventory(instances=False)
        except NvmlError as exc:
            reason = f"NVML: {exc}"
            if reason != self._reported:
                self._reported = reason
                log.warning("nvidia: GPUs cannot be read: %s", reason)
            return {
                name: dralet.DeviceHealth(dralet.HealthStatus.UNKNOWN, reason)
                for name in self.held.holders()
            }
        self._reported = ""
        present = {name: gpu.uuid for name, gpu in inventory.whole.items()}
        present.update({name: p.gpu.uuid for name, p in inventory.placements.items()})
        broken = self.xids.faults()
        health = {
            name: dralet.DeviceHealth(dralet.HealthStatus.UNHEALTHY, broken[uuid])
            if uuid in broken
            else dralet.DeviceHealth(dralet.HealthStatus.HEALTHY)
            for name, uuid in present.items()
        }
        for name, holders in self.held.holders().items():
            for _, state in holders:
                if state and present.get(name) != state.get("uuid"):
                    health[name] = dralet.DeviceHealth(
                        dralet.HealthStatus.UNHEALTHY, f"GPU {state.get('uuid')} is gone"
                    )
        return health
