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

__all__ = ["Checkpoint", "ClaimRecord", "ClaimState", "DeviceRecord", "evolve"]

CONFIG_KEY = "config"
"""``backend_state`` key of the opaque parameters that apply to the device, as records
written before configs kept their source had them (read, never written)."""
CONFIGS_KEY = "configs"
"""``backend_state`` key of the configs that apply to the device, in precedence order:
``{"source": "class"|"claim", "requests": [...], "parameters": {...}, "order": n}``
(``order``: its place among all of the claim's configs for this driver)."""
PREPARED_STATE_KEY = "preparedState"
"""``backend_state`` key of what ``backend.prepare`` returned; present once it returned."""


_Value = TypeVar("_Value", "ClaimRecord", "DeviceRecord")


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
    """One allocated device of a claim, as the claim engine prepared it."""

    pool: str
    device: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    """The CDI devices of the claim's own spec, the device's first."""
    external_cdi_ids: tuple[str, ...] = ()
    """CDI devices other specs define, given to the kubelet after the device's own."""
    admin_access: bool = False
    share_id: str = ""
    backend_state: Mapping[str, Any] = field(default_factory=dict)
    """``{"configs": [...], "preparedState": {...}}``."""
    result_fields: Mapping[str, Any] = field(default_factory=dict)
    """The allocation result's other fields as the API sent them (``consumedCapacity``,
    ``tolerations``, and any newer than this release): ``release_claim`` gets the
    device as ``prepare_claim`` saw it, also after a restart with the claim gone."""

    @property
    def configs(self) -> tuple[Mapping[str, Any], ...]:
        """The configs that apply to the device (see ``CONFIGS_KEY``); an older record's
        bare parameters read as claim configs for every request."""
        if CONFIGS_KEY in self.backend_state:
            return tuple(self.backend_state[CONFIGS_KEY])
        return tuple(
            {"source": "claim", "requests": [], "parameters": dict(p), "order": i}
            for i, p in enumerate(self.backend_state.get(CONFIG_KEY, ()))
        )

    @property
    def config(self) -> tuple[Mapping[str, Any], ...]:
        """The ``parameters`` of ``configs``, in precedence order."""
        return tuple(c.get("parameters") or {} for c in self.configs)

    @property
    def prepared(self) -> bool:
        """``backend.prepare`` returned for this device and its state is recorded."""
        return PREPARED_STATE_KEY in self.backend_state

    @property
    def prepared_state(self) -> Mapping[str, Any]:
        """The state ``backend.prepare`` returned, to hand back to ``release``.

        Records written before the state had a key of its own kept it merged beside the
        config; those are read the same way.
        """
        if PREPARED_STATE_KEY in self.backend_state:
            return dict(self.backend_state[PREPARED_STATE_KEY])
        return {k: v for k, v in self.backend_state.items() if k not in (CONFIG_KEY, CONFIGS_KEY)}

    def with_prepared_state(self, state: Mapping[str, Any]) -> DeviceRecord:
        kept = {
            k: self.backend_state[k] for k in (CONFIG_KEY, CONFIGS_KEY) if k in self.backend_state
        }
        return evolve(self, backend_state={**kept, PREPARED_STATE_KEY: dict(state)})


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
