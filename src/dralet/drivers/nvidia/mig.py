"""MIG partitions of NVIDIA GPUs: their device names, the counters they share, and the
ledger of the instances dralet created.

A GPU in MIG mode is offered as MIG devices named ``gpu-<minor>-mig-<profile>-<start>``
(``gpu-0-mig-1g-10gb-3``: profile ``1g.10gb`` at memory slice 3), never whole. With
partitions made on demand (``mig: dynamic``) every placement NVML allows is published,
all consuming one counter set per GPU: a counter per memory slice (so overlapping
placements exclude each other) and the engines and multiprocessors of the whole GPU
(the largest profile's). The scheduler picks a placement and prepare creates it.

The ledger (``nvidia-mig.json`` beside the claim store) names each instance dralet
created and for which claim, written before the instance is made and cleared after it is
destroyed, so a driver killed between the two steps finds it again and a MIG device an
administrator made is never destroyed.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.nvidia.nvml import Gpu, GpuInstance, MigDevice, MigProfile

__all__ = [
    "LEDGER_NAME",
    "MIG_MODES",
    "LedgerError",
    "MigLedger",
    "Placement",
    "counter_set",
    "counter_set_name",
    "device_name",
]

MIG_MODES = ("existing", "dynamic")
"""``existing``: only MIG devices already made are offered; ``dynamic``: every placement
is offered and prepare makes it."""
LEDGER_NAME = "nvidia-mig.json"
_SLUG = re.compile(r"[^a-z0-9]+")
_ENGINES = (
    ("multiprocessors", "multiprocessors", "multiprocessors"),
    ("copy-engines", "copyEngines", "copy_engines"),
    ("decoders", "decoders", "decoders"),
    ("encoders", "encoders", "encoders"),
    ("jpeg-engines", "jpegEngines", "jpeg_engines"),
    ("ofa-engines", "ofaEngines", "ofa_engines"),
)
"""Counter name (a DNS label), capacity name (a C identifier) and the ``MigProfile``
field each counts."""


def device_name(gpu: Gpu, profile_name: str, start: int) -> str:
    """``gpu-<minor>-mig-<profile>-<start>``, the profile's name as a DNS label part."""
    slug = _SLUG.sub("-", profile_name.lower()).strip("-")
    return f"gpu-{gpu.minor_number}-mig-{slug}-{start}"


def counter_set_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor_number}-mig"


def _memory_slices(profiles: Sequence[MigProfile]) -> int:
    return max((p.memory_slices + max(p.starts) for p in profiles if p.starts), default=0)


def counter_set(gpu: Gpu, profiles: Sequence[MigProfile]) -> dralet.CounterSet:
    """The counters every placement of the GPU consumes from."""
    counters = {f"memory-slice-{i}": "1" for i in range(_memory_slices(profiles))}
    for counter, _, attribute in _ENGINES:
        counters[counter] = str(max((getattr(p, attribute) for p in profiles), default=0))
    return dralet.CounterSet(name=counter_set_name(gpu), counters=counters)


def consumption(gpu: Gpu, profile: MigProfile, start: int) -> dralet.CounterConsumption:
    """What one placement of ``profile`` at ``start`` takes from its GPU's counters."""
    counters = {f"memory-slice-{i}": "1" for i in range(start, start + profile.memory_slices)}
    for counter, _, attribute in _ENGINES:
        amount = getattr(profile, attribute)
        if amount:
            counters[counter] = str(amount)
    return dralet.CounterConsumption(counter_set=counter_set_name(gpu), counters=counters)


def capacity(profile: MigProfile) -> dict[str, str]:
    """A MIG device's capacity: its memory and engines."""
    out = {"memory": f"{profile.memory_mib}Mi"}
    for _, name, attribute in _ENGINES:
        out[name] = str(getattr(profile, attribute))
    return out


@dataclass(frozen=True)
class Placement:
    """One MIG device name resolved: the GPU, the profile and where it starts, the GPU
    instance there now and the MIG device (its compute instance) there now."""

    gpu: Gpu
    profile: MigProfile
    start: int
    instance: GpuInstance | None
    present: MigDevice | None


def placements(
    gpu: Gpu,
    profiles: Sequence[MigProfile],
    instances: Sequence[GpuInstance],
    present: Sequence[MigDevice],
) -> dict[str, Placement]:
    """Every placement of every profile of the GPU, by device name."""
    by_place = {(gi.profile_id, gi.start): gi for gi in instances}
    by_instance = {(d.gi, d.ci): d for d in present}
    out = {}
    for profile in profiles:
        for start in profile.starts:
            gi = by_place.get((profile.id, start))
            device = None
            if gi is not None and gi.compute_instances:
                device = by_instance.get((gi.id, gi.compute_instances[0]))
            out[device_name(gpu, profile.name, start)] = Placement(gpu, profile, start, gi, device)
    return out


class LedgerError(Exception):
    """The ledger cannot be read: which instances dralet made is unknown (fail closed)."""


@dataclass(frozen=True)
class MigLedger:
    """``device name → {"claim": uid, "gpu": uuid, "gi": id}`` of the GPU instances
    dralet made (``gi`` is missing while one is being made)."""

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)
    """Claims are prepared in parallel threads: each read-modify-write holds this."""

    def read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LedgerError(f"MIG ledger {self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise LedgerError(f"MIG ledger {self.path}: not a JSON object")
        return data

    def _write(self, entries: Mapping[str, Mapping[str, Any]]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        dralet.atomic_write(self.path, json.dumps(entries, sort_keys=True).encode())

    def put(self, name: str, entry: Mapping[str, Any]) -> None:
        with self._lock:
            entries = self.read()
            entries[name] = dict(entry)
            self._write(entries)

    def remove(self, name: str) -> None:
        with self._lock:
            entries = self.read()
            if entries.pop(name, None) is not None:
                self._write(entries)
