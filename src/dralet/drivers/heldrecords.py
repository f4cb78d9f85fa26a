"""Which claims hold which devices, read from dralet's own claim records: for backends
that change nothing on the host when they prepare (hostdev, whole NVIDIA GPUs), so the
records are the only place that knows which container has which device."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dralet
from dralet import errors
from dralet.checkpoint import database

__all__ = ["HeldRecords", "NoHardwareState"]

log = logging.getLogger(__name__)

Holders = dict[str, list[tuple[str, Mapping[str, Any]]]]


@dataclass(frozen=True)
class HeldRecords:
    """The records of ``store_path`` (and ``legacy_path``, an older checkpoint not yet
    migrated), read without writing."""

    store_path: Path
    legacy_path: Path | None = None
    driver: str = "driver"
    """Names the driver in the one warning an unreadable store gives."""

    def holders(self) -> Holders:
        """Device → (claim UID, the state prepare returned) of every claim holding it."""
        try:
            snapshot = database.read_only_snapshot(self.store_path, self.legacy_path)
        except errors.CheckpointCorruptError as exc:
            # The framework fails closed on the same records; nothing to add from here.
            log.warning("%s: claim records unreadable: %s", self.driver, exc)
            return {}
        holders: Holders = {}
        for uid, record in snapshot.checkpoint.claims.items():
            if record.holds_devices:
                for device in record.devices:
                    state = device.backend_state.get("preparedState") or {}
                    holders.setdefault(device.device, []).append((uid, state))
        return holders

    def devices_in_use(self) -> dict[str, str | Collection[str]]:
        """``ClaimBackend.devices_in_use`` from the records: one UID, or several when shared."""
        in_use: dict[str, str | Collection[str]] = {}
        for name, holders in self.holders().items():
            uids = sorted({uid for uid, _ in holders})
            in_use[name] = uids[0] if len(uids) == 1 else uids
        return in_use


class NoHardwareState:
    """The two ``ClaimBackend`` methods of a backend that changes nothing on the host:
    release undoes nothing, and what is in use is what the records say. The backend
    sets ``records``."""

    records: HeldRecords

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Nothing to undo: the device was only given to the container."""

    def devices_in_use(self) -> dict[str, str | Collection[str]]:
        """From dralet's claim records: the backend holds nothing of its own."""
        return self.records.devices_in_use()
