"""The backend protocol a driver implements, and the values it trades in.

A backend knows hardware and nothing else: it lists its devices, prepares a claim's
devices (returning the container edits that give a container access), and releases them.
The framework owns everything around that: ordering, the checkpoint, CDI files, locks,
recovery, the kubelet protocol. Every backend method must be idempotent: the framework
may call ``prepare_claim`` or ``release_claim`` again for the same claim after a crash.

``ClaimBackend`` is claim-level, like the Go helper's ``DRAPlugin.PrepareResourceClaims``
(k8s.io/dynamic-resource-allocation/kubeletplugin): one call sees all of a claim's
devices for this driver and its opaque configs in precedence order. Its methods may be
plain ``def`` (run in a thread pool) or ``async def`` (``dralet.node.claims.calls`` calls them).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType, Protocol, TypeAlias, TypeVar, Union, runtime_checkable

from dralet.cdi.spec import ContainerEdits
from dralet.checkpoint.allocated import AllocatedDevice, ConfigSource, DeviceConfig
from dralet.node.devices import AttributeValue, Device, Version

__all__ = [
    "AllocatedDevice",
    "AttributeValue",
    "ClaimAllocation",
    "ClaimBackend",
    "ClaimRef",
    "ClaimUID",
    "ConfigSource",
    "Device",
    "DeviceConfig",
    "DeviceHealth",
    "DeviceMetadata",
    "DeviceStatus",
    "HealthNotSupported",
    "HealthStatus",
    "HeldDevice",
    "NetworkData",
    "PartialPrepareError",
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


_T = TypeVar("_T")
MaybeAwaitable: TypeAlias = Union[_T, Awaitable[_T]]  # noqa: UP007 - a generic alias
"""What a backend method returns: a value (plain ``def``) or an awaitable (``async def``)."""


@dataclass(frozen=True)
class ClaimAllocation:
    """What ``ClaimBackend.prepare_claim`` and ``release_claim`` receive.

    ``devices``: the claim's allocation results for this driver on this node.
    ``configs``: every opaque config for this driver in precedence order (all DeviceClass
    configs, then all claim configs, each group in API order; a later config wins over
    an earlier one for the requests both apply to).
    """

    claim: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    configs: tuple[DeviceConfig, ...] = ()


@dataclass(frozen=True)
class NetworkData:
    """A network device's identity in the pod, for the claim's ``status.devices``."""

    interface_name: str = ""
    ips: Sequence[str] = ()
    """Addresses in CIDR notation (``10.9.8.7/24``), at most 16."""
    hardware_address: str = ""


@dataclass(frozen=True)
class DeviceStatus:
    """What a prepared device reports in the claim's ``status.devices`` entry when the
    driver writes device status (``DriverSettings.write_device_status``).

    ``conditions``: ``metav1.Condition`` dicts (``type``, ``status``, ``reason``,
    ``message``; the time is filled in when missing), at most 8. Without any, the entry
    gets a ``Ready`` condition that is True. ``data``: driver-specific JSON, at most 10 KiB.
    """

    conditions: Sequence[Mapping[str, Any]] = ()
    data: Mapping[str, Any] | None = None
    network: NetworkData | None = None


@dataclass(frozen=True)
class DeviceMetadata:
    """What the device's entry in its request's metadata file says (KEP-5304), when the
    driver writes device metadata (``DriverSettings.device_metadata``): attributes the
    workload may read (the published ones, or others), and network data. Without one,
    the entry names the device and carries the network data of ``status``, if any."""

    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    network: NetworkData | None = None


@dataclass(frozen=True)
class PreparedDevice:
    """What a backend returns for a prepared device.

    ``state`` is stored in the checkpoint and handed back to ``release``; it must be
    JSON-serializable and is all the backend may rely on after a restart.
    ``more_edits``: further CDI devices the container gets for this device (a control
    node beside the device node, say), each under its own CDI id
    ``<claim UID>-<device>-<n>`` (n = 1, 2, …) next to the device's own.
    ``status``: what the claim's ``status.devices`` entry for this device says, when the
    driver writes device status; None gives the default ``Ready`` entry.
    ``metadata``: the device's entry in the metadata file of its request, when the
    driver writes device metadata.
    ``external_cdi_ids``: fully qualified ids of CDI devices another spec on the node
    defines (the NVIDIA Container Toolkit's ``nvidia.com/gpu=<uuid>``, say), given to
    the kubelet after the device's own; dralet neither writes nor removes them. Their
    kind must not be the driver's own.
    """

    edits: ContainerEdits
    state: Mapping[str, Any] = field(default_factory=dict)
    more_edits: Sequence[ContainerEdits] = ()
    external_cdi_ids: Sequence[str] = ()
    status: DeviceStatus | None = None
    metadata: DeviceMetadata | None = None


class PartialPrepareError(Exception):
    """``prepare_claim`` failed after preparing some of the devices.

    ``prepared`` lines up with ``ClaimAllocation.devices``: the result of each device
    that was prepared, None for the others. The framework records those states and
    releases with them; ``cause`` is the error reported for the claim. A backend that
    raises anything else from ``prepare_claim`` must leave nothing held, or accept a
    ``release_claim`` with empty states for the devices it did prepare.
    """

    def __init__(self, cause: BaseException, prepared: Sequence[PreparedDevice | None]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.prepared = tuple(prepared)


class HealthStatus(enum.Enum):
    """A device's health as the kubelet's DRA health service reports it (the values of
    its ``HealthStatus`` enum)."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


class HealthNotSupported(Exception):
    """Raised by a backend's ``health()`` that does not report device health (the Go
    helper's ``ErrHealthNotSupported``). Raised at start, the driver then advertises no
    health service to the kubelet; raised later, it ends the kubelet's health watch."""


@dataclass(frozen=True)
class DeviceHealth:
    """What ``health()`` says of one device: its status and, when not healthy, why."""

    status: HealthStatus
    message: str = ""


@dataclass(frozen=True)
class HeldDevice:
    """A device dralet's claim records hold for a claim, with the state ``prepare_claim``
    returned for it (empty while its prepare has not returned)."""

    claim: ClaimUID
    device: str
    state: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ClaimBackend(Protocol):
    """What a driver author implements.

    Every method may be ``def`` (run in a thread pool) or ``async def``; each call is
    bounded by ``DriverSettings.backend_call_timeout`` (a call that exceeds it fails the
    claim with a retryable error and is rolled back like any failed prepare).

    Optionally, ``restore_held(held: Sequence[HeldDevice])``: every device dralet's claim
    records hold, told once the records are read at start (and by ``dralet audit``),
    before anything asks ``devices_in_use``. A backend that changes nothing on the host
    (it only hands device nodes to containers) has no record of its own of what is held:
    it takes this as its starting point and follows its own ``prepare_claim`` and
    ``release_claim`` calls from there.
    """

    def devices(self) -> MaybeAwaitable[Sequence[Device]]:
        """Every device this node offers, in a stable order."""
        ...

    def prepare_claim(
        self, allocation: ClaimAllocation
    ) -> MaybeAwaitable[Sequence[PreparedDevice]]:
        """Prepare all of ``allocation.devices``; one result per device, in the same order.

        The same call again returns the same results. On a failure after some devices
        were prepared, raise ``PartialPrepareError`` so they are released with their state.
        """
        ...

    def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> MaybeAwaitable[None]:
        """Undo ``prepare_claim``: ``states[i]`` is the state recorded for device ``i``
        (empty if its prepare never returned); ``allocation`` carries the same configs.
        Releasing a device that is not held by the claim is a success."""
        ...

    def devices_in_use(self) -> MaybeAwaitable[Mapping[str, str | Collection[str]]]:
        """Device name → the claim UID (or UIDs, for a device shared by several claims
        through consumable capacity) holding it, as the hardware says."""
        ...

    def survives_reboot(
        self, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> MaybeAwaitable[bool]:
        """Whether a device prepared before a reboot is still prepared after it (asked
        for many devices at once: a plain ``def`` in one thread, one after the other)."""
        ...

    def health(self) -> MaybeAwaitable[Mapping[str, DeviceHealth]]:
        """Device name → current health (devices left out are UNKNOWN); raise
        ``HealthNotSupported`` if this backend does not report health."""
        ...
