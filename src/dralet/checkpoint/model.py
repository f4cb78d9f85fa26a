"""Checkpoint values: what the driver must remember about each claim, and in which phase.

A record moves ``PrepareStarted`` → ``PrepareCompleted`` → ``UnprepareStarted`` →
(``Released`` while the claim's finalizer is still being removed) → gone. Every field
unprepare and recovery need is here, so neither ever asks the API server.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Checkpoint", "ClaimRecord", "ClaimState", "DeviceRecord"]


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
    """One allocated device of a claim, as the ledger prepared it."""

    pool: str
    device: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    admin_access: bool = False
    share_id: str = ""
    backend_state: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()
    cdi_spec: Mapping[str, Any] | None = None
    finalizer_added: bool = False
    boot_id: str = ""
    updated_at: str = ""

    def with_state(self, state: ClaimState, **changes: Any) -> ClaimRecord:
        return replace(self, state=state, **changes)

    @property
    def holds_devices(self) -> bool:
        return self.state in HOLDING_STATES


@dataclass(frozen=True)
class Checkpoint:
    driver: str = ""
    boot_id: str = ""
    claims: Mapping[str, ClaimRecord] = field(default_factory=dict)

    def with_claim(self, record: ClaimRecord) -> Checkpoint:
        return replace(self, claims={**self.claims, record.uid: record})

    def without_claim(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def holder_of(self, pool: str, device: str, *, share_id: str = "") -> ClaimRecord | None:
        """The record (if any) whose exclusive use of ``pool/device`` is still in force."""
        for record in self.claims.values():
            if not record.holds_devices:
                continue
            for d in record.devices:
                if (
                    d.pool == pool
                    and d.device == device
                    and not d.admin_access
                    and d.share_id == share_id
                ):
                    return record
        return None
