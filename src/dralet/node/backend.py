"""The ``DeviceBackend`` protocol a driver implements, and the values it trades in.

A backend knows hardware and nothing else: it lists its devices, prepares one device for
one claim (returning the container edits that give a container access), and releases it.
The framework owns everything around that: ordering, the checkpoint, CDI files, locks,
recovery, the kubelet protocol. Every backend method must be idempotent: the framework
may call ``prepare`` or ``release`` again for the same claim and device after a crash.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType, Protocol, runtime_checkable

from dralet.cdi.spec import ContainerEdits
from dralet.node.devices import AttributeValue, Device, Version

__all__ = [
    "AllocatedDevice",
    "AttributeValue",
    "ClaimRef",
    "ClaimUID",
    "Device",
    "DeviceBackend",
    "DeviceHealth",
    "HealthStatus",
    "PreparedDevice",
    "Version",
]

ClaimUID = NewType("ClaimUID", str)


@dataclass(frozen=True)
class ClaimRef:
    """The identity of a ResourceClaim, as the kubelet sends it."""

    uid: ClaimUID
    namespace: str
    name: str


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of a claim that this driver must prepare."""

    request: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PreparedDevice:
    """What a backend returns for a prepared device.

    ``state`` is stored in the checkpoint and handed back to ``release``; it must be
    JSON-serializable and is all the backend may rely on after a restart.
    """

    edits: ContainerEdits
    state: Mapping[str, Any] = field(default_factory=dict)


class HealthStatus(enum.Enum):
    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True)
class DeviceHealth:
    status: HealthStatus
    message: str = ""


@runtime_checkable
class DeviceBackend(Protocol):
    """What a driver author implements."""

    async def devices(self) -> Sequence[Device]:
        """Every device this node offers, in a stable order."""
        ...

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        """Make ``device`` usable for ``claim``; the same call again returns the same result."""
        ...

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        """Undo ``prepare``; releasing a device that is not held by ``claim`` is a success."""
        ...

    async def devices_in_use(self) -> Mapping[str, str]:
        """Device name → claim UID for every device the hardware says is in use."""
        ...

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """Whether a device prepared before a reboot is still prepared after it."""
        ...

    async def health(self) -> Mapping[str, DeviceHealth]:
        """Device name → current health (devices left out are UNKNOWN)."""
        ...
