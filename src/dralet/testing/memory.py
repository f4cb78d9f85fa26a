"""``MemoryDevices``: a backend whose devices cost nothing to prepare.

For tests and benchmarks of what sits around a backend (the claim engine, its store,
the gRPC services): every call answers at once from a dict, and a request for a device
another claim holds is refused, so a test can see the engine never lets one through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dralet import errors
from dralet.cdi.spec import ContainerEdits
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    DeviceHealth,
    PartialPrepareError,
    PreparedDevice,
)
from dralet.node.devices import Device

__all__ = ["MemoryDevices"]


class MemoryDevices:
    """``count`` devices named ``<prefix>-0`` … held in memory (nothing survives the
    process: for tests that do not restart the driver). A ``ClaimBackend`` that prepares
    and releases a claim's devices one by one with ``prepare`` and ``release``, which a
    test may override to change what one device gets."""

    def __init__(self, count: int, *, prefix: str = "gpu") -> None:
        self.names = [f"{prefix}-{i}" for i in range(count)]
        self.held: dict[str, str] = {}
        self.refused: list[str] = []
        """``device held by X, asked for Y`` for every request the engine let through for
        a device another claim held (it must stay empty)."""

    async def devices(self) -> Sequence[Device]:
        return [Device(name=name) for name in self.names]

    async def prepare_claim(self, allocation: ClaimAllocation) -> Sequence[PreparedDevice]:
        """``prepare`` of each device; a failure after the first is partial."""
        prepared: list[PreparedDevice | None] = [None] * len(allocation.devices)
        for index, device in enumerate(allocation.devices):
            try:
                prepared[index] = await self.prepare(allocation.claim, device)
            except Exception as exc:
                if index == 0:
                    raise
                raise PartialPrepareError(exc, prepared) from exc
        return [p for p in prepared if p is not None]

    async def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """``release`` of each device."""
        for device, state in zip(allocation.devices, states, strict=True):
            await self.release(allocation.claim, device, state)

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        """Hold one device of ``claim``; refused while another claim holds it."""
        holder = self.held.setdefault(device.device, claim.uid)
        if holder != claim.uid and not device.admin_access:
            self.refused.append(f"{device.device} held by {holder}, asked for {claim.uid}")
            raise errors.ClaimError(claim.uid, f"{device.device} is held by claim {holder}")
        edits = ContainerEdits(env=(f"DEVICE={device.device}",))
        return PreparedDevice(edits=edits, state={"device": device.device})

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        """Give back one device of ``claim`` (nothing when another claim holds it)."""
        if self.held.get(device.device) == claim.uid:
            del self.held[device.device]

    async def devices_in_use(self) -> Mapping[str, str]:
        return dict(self.held)

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return True

    async def health(self) -> Mapping[str, DeviceHealth]:
        return {}
