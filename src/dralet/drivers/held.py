"""Which claims hold which devices, for backends that change nothing on the host when they
prepare (hostdev, whole NVIDIA GPUs): nothing on the host records which container has
which device, so dralet tells them at start what its claim records hold
(``restore_held``), and they follow their own prepares and releases from there."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import dralet

__all__ = ["HeldDevices", "NoHardwareState"]

Holders = dict[str, list[tuple[str, Mapping[str, Any]]]]


class HeldDevices:
    """Device → claim UID → the state prepare returned, safe to use from several threads
    (dralet runs a plain ``def`` backend's calls in a thread pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, Mapping[str, Any]]] = {}

    def restore(self, held: Sequence[dralet.HeldDevice]) -> None:
        """Start again from what dralet's records hold."""
        restored: dict[str, dict[str, Mapping[str, Any]]] = {}
        for entry in held:
            restored.setdefault(entry.device, {})[entry.claim] = dict(entry.state)
        with self._lock:
            self._held = restored

    def prepared(
        self, allocation: dralet.ClaimAllocation, results: Sequence[dralet.PreparedDevice]
    ) -> None:
        """``allocation``'s devices are held by its claim with the states of ``results``."""
        with self._lock:
            for device, result in zip(allocation.devices, results, strict=True):
                self._held.setdefault(device.device, {})[allocation.claim.uid] = dict(result.state)

    def released(self, allocation: dralet.ClaimAllocation) -> None:
        """``allocation``'s devices are no longer held by its claim."""
        with self._lock:
            for device in allocation.devices:
                holders = self._held.get(device.device, {})
                holders.pop(allocation.claim.uid, None)
                if not holders:
                    self._held.pop(device.device, None)

    def holders(self) -> Holders:
        """Device → (claim UID, the state prepare returned) of every claim holding it."""
        with self._lock:
            return {
                device: sorted(claims.items()) for device, claims in self._held.items() if claims
            }

    def devices_in_use(self) -> dict[str, str | Collection[str]]:
        """``ClaimBackend.devices_in_use``: one UID, or several when shared."""
        in_use: dict[str, str | Collection[str]] = {}
        for device, holders in self.holders().items():
            uids = [uid for uid, _ in holders]
            in_use[device] = uids[0] if len(uids) == 1 else uids
        return in_use


class NoHardwareState:
    """The ``ClaimBackend`` methods of a backend that changes nothing on the host: release
    undoes nothing, and what is in use is what dralet's records say, followed since.
    The backend sets ``held`` and calls ``held.prepared`` when ``prepare_claim`` returns."""

    held: HeldDevices

    def restore_held(self, held: Sequence[dralet.HeldDevice]) -> None:
        """What dralet's claim records hold, told at start."""
        self.held.restore(held)

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Nothing to undo on the host: the device was only given to the container."""
        self.held.released(allocation)

    def devices_in_use(self) -> dict[str, str | Collection[str]]:
        """What dralet's records held at start, followed through prepares and releases."""
        return self.held.devices_in_use()
