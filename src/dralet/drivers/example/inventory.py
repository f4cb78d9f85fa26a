"""What the simulated GPUs offer the scheduler.

Each GPU ``gpu-<i>`` is published whole. With ``partitions: N`` it is also published as
N equal partitions ``gpu-<i>-part-<j>``, all of them and the whole GPU taking memory from
the GPU's counter set ``gpu-<i>`` (partitionable devices: the scheduler never hands out
more than the GPU has). With ``shared: K`` the last K GPUs are shared instead: one device
that many claims get a share of, each asking for memory under a request policy
(consumable capacity; each share has a ``shareID`` and its ``consumedCapacity``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dralet

__all__ = ["DeviceName", "Layout", "split_name"]

_NAME = re.compile(r"^gpu-(\d+)(?:-part-(\d+))?$")
SHARE_POLICY = dralet.RequestPolicy(
    default="10Gi", valid_range=dralet.QuantityRange(min="1Gi", step="1Gi")
)
"""What one share of a shared GPU may ask for: whole Gi, 10Gi when it names no amount."""


@dataclass(frozen=True)
class DeviceName:
    """A device name taken apart: the GPU's index, and the partition's (None: whole)."""

    gpu: int
    partition: int | None = None


def split_name(device: str) -> DeviceName | None:
    """``gpu-<i>`` or ``gpu-<i>-part-<j>`` taken apart, whatever the layout; None otherwise."""
    match = _NAME.match(device)
    if match is None:
        return None
    return DeviceName(int(match[1]), None if match[2] is None else int(match[2]))


@dataclass(frozen=True)
class Layout:
    count: int
    memory: str
    partitions: int = 0
    shared: int = 0

    def __post_init__(self) -> None:
        if self.partitions < 0 or self.shared < 0:
            raise ValueError("partitions and shared: expected whole numbers >= 0")
        if self.shared > self.count:
            raise ValueError(f"shared: {self.shared} GPUs, but there are {self.count}")
        if self.partitions and dralet.parse_quantity(self.memory) % self.partitions:
            raise ValueError(f"{self.memory} of memory does not split into {self.partitions}")

    def is_shared(self, gpu: int) -> bool:
        return gpu >= self.count - self.shared

    def is_partitioned(self, gpu: int) -> bool:
        return self.partitions > 0 and not self.is_shared(gpu)

    @property
    def partition_memory(self) -> str:
        share = dralet.parse_quantity(self.memory) / self.partitions
        for suffix, unit in (("Gi", 2**30), ("Mi", 2**20)):
            if share % unit == 0:
                return f"{share // unit}{suffix}"
        return dralet.format_quantity(share)

    def parse(self, device: str) -> DeviceName | None:
        """The device's GPU and partition, or None when this node publishes no such device."""
        name = split_name(device)
        if name is None or name.gpu >= self.count:
            return None
        part = name.partition
        if part is not None and (not self.is_partitioned(name.gpu) or part >= self.partitions):
            return None
        return name

    def counter_sets(self) -> list[dralet.CounterSet]:
        return [
            dralet.CounterSet(name=f"gpu-{i}", counters={"memory": self.memory})
            for i in range(self.count)
            if self.is_partitioned(i)
        ]

    def names(self) -> list[tuple[str, DeviceName]]:
        """Every device this layout publishes, in order: each GPU, then its partitions."""
        out: list[tuple[str, DeviceName]] = []
        for i in range(self.count):
            out.append((f"gpu-{i}", DeviceName(i)))
            parts = self.partitions if self.is_partitioned(i) else 0
            out += [(f"gpu-{i}-part-{j}", DeviceName(i, j)) for j in range(parts)]
        return out

    def devices(self, *, uuid_of: Callable[[str], str], model: str) -> Sequence[dralet.Device]:
        devices: list[dralet.Device] = []
        for name, which in self.names():
            i = which.gpu
            attributes: dict[str, dralet.AttributeValue] = {
                "uuid": uuid_of(name),
                "model": model,
                "index": i,
                "driverVersion": dralet.Version("1.0.0"),
            }
            if which.partition is not None:
                attributes["partition"] = which.partition
                memory = self.partition_memory
                device = dralet.Device(
                    name=name,
                    attributes=attributes,
                    capacity={"memory": memory},
                    consumes_counters=self._consumes(i, memory),
                    partition=True,
                )
            elif self.is_shared(i):
                device = dralet.Device(
                    name=name,
                    attributes=attributes,
                    capacity={"memory": dralet.Capacity(self.memory, SHARE_POLICY)},
                    allow_multiple_allocations=True,
                )
            else:
                whole = self._consumes(i, self.memory) if self.is_partitioned(i) else ()
                device = dralet.Device(
                    name=name,
                    attributes=attributes,
                    capacity={"memory": self.memory},
                    consumes_counters=whole,
                )
            devices.append(device)
        return devices

    @staticmethod
    def _consumes(gpu: int, memory: str) -> tuple[dralet.CounterConsumption, ...]:
        return (dralet.CounterConsumption(counter_set=f"gpu-{gpu}", counters={"memory": memory}),)
