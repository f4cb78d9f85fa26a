"""Checkpoint values: what the driver must remember about each claim, and in which phase.

A record moves ``PrepareStarted`` → ``PrepareCompleted`` → ``UnprepareStarted`` →
(``Released`` while the claim's finalizer is still being removed) → gone. Every field
unprepare and recovery need is here, so neither ever asks the API server.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dralet.checkpoint.allocated import AllocatedDevice

__all__ = ["Checkpoint", "ClaimRecord", "ClaimState", "DeviceRecord", "construct", "evolve"]

_Value = TypeVar("_Value", "ClaimRecord", "DeviceRecord")
_Built = TypeVar("_Built", "ClaimRecord", "DeviceRecord", AllocatedDevice)


def construct(cls: type[_Built], **fields: Any) -> _Built:
    """An instance of a record type holding ``fields``, every field of it, made without
    calling ``__init__`` (for the codec, which builds each record of a store read: a
    frozen dataclass's ``__init__`` pays an ``object.__setattr__`` per field, half of a
    record's decode). Nothing checks that every field is given: ``test_codec`` holds
    the codec's records to their classes' fields."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


def evolve(value: _Value, **changes: Any) -> _Value:
    """``dataclasses.replace`` for the record types (which have no ``__post_init__`` and
    no ``InitVar``): a copy with ``changes``, made without calling ``__init__``. A claim
    moves through several copies per step, and ``replace``'s work per field showed in
    profiles of 1,000-claim calls."""
    if not changes.keys() <= value.__dataclass_fields__.keys():
        unknown = sorted(changes.keys() - value.__dataclass_fields__.keys())
        raise TypeError(f"{type(value).__name__} has no field {unknown[0]!r}")
    copy = object.__new__(type(value))
    copy.__dict__.update(value.__dict__, **changes)
    return copy


class ClaimState(enum.StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"
    RELEASED = "Released"


# States in which the record's devices may be held by the backend.
HOLDING_STATES = frozenset(
    {ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED, ClaimState.UNPREPARE_STARTED}
)


@dataclass(frozen=True)
class DeviceRecord:
    """One allocated device of a claim: the device the backend is handed, kept as read
    from the claim, and what became of it.

    ``release_claim`` gets exactly the ``allocated`` device and the ``state`` that
    ``prepare_claim`` saw and returned, also after a restart with the claim gone.
    """

    allocated: AllocatedDevice
    """The allocation result as the backend is handed it: request, pool, device, the
    configs that apply in precedence order, and every other field the API sent."""
    request_names: tuple[str, ...] = ()
    """Every request of the claim the device is allocated for (the kubelet's names)."""
    config_places: tuple[int, ...] = ()
    """Where each of ``allocated.configs`` stands among all of the claim's configs for
    this driver: the claim's configs the backend is handed are the devices', in this
    order (empty: their own order, ``0..n-1``)."""
    cdi_device_ids: tuple[str, ...] = ()
    """The CDI devices of the claim's own spec, the device's first."""
    external_cdi_ids: tuple[str, ...] = ()
    """CDI devices other specs define, given to the kubelet after the device's own."""
    state: Mapping[str, Any] | None = None
    """What ``prepare_claim`` returned for the device; None until it returned."""

    @property
    def pool(self) -> str:
        return self.allocated.pool

    @property
    def device(self) -> str:
        return self.allocated.device

    @property
    def share_id(self) -> str:
        return self.allocated.share_id

    @property
    def admin_access(self) -> bool:
        return self.allocated.admin_access

    @property
    def places(self) -> tuple[int, ...]:
        """``config_places``, one per config of ``allocated``."""
        return self.config_places or tuple(range(len(self.allocated.configs)))

    @property
    def prepared(self) -> bool:
        """``prepare_claim`` returned for this device and its state is recorded."""
        return self.state is not None

    @property
    def prepared_state(self) -> Mapping[str, Any]:
        """The state to hand back to ``release_claim``: empty while ``prepare_claim``
        has not returned for the device."""
        return {} if self.state is None else self.state

    def with_prepared_state(self, state: Mapping[str, Any]) -> DeviceRecord:
        return evolve(self, state=dict(state))


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()
    cdi_spec: Mapping[str, Any] | None = None
    cdi_spec_stamp: tuple[int, int, int] | None = None
    """The spec file as written (inode, size, mtime ns): at restart a file with this
    stamp is known to hold ``cdi_spec`` without being read again."""
    device_metadata: Mapping[str, str] = field(default_factory=dict)
    """Request -> the content of its device metadata file (KEP-5304), when written."""
    finalizer_added: bool = False
    boot_id: str = ""
    updated_at: str = ""

    def with_state(self, state: ClaimState, **changes: Any) -> ClaimRecord:
        return evolve(self, state=state, **changes)

    @property
    def holds_devices(self) -> bool:
        return self.state in HOLDING_STATES


@dataclass(frozen=True)
class Checkpoint:
    driver: str = ""
    boot_id: str = ""
    claims: Mapping[str, ClaimRecord] = field(default_factory=dict)
