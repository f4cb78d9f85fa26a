"""A strict fake backend: it fails the test when ``release`` gets back a state other than
the one its ``prepare`` returned, or when a device is prepared for two claims at once.

The framework promises every backend that ``release(claim, device, state)`` receives
exactly the ``state`` (and the device's opaque config) that ``prepare`` returned for
that claim and device, after a partial failure, a crash at any point, a reboot, or in
fail-closed mode. A backend that ignores its state cannot notice when that promise is
broken; this one hands out a fresh token with every first prepare and checks it.

Use it in a driver's own tests, alone or around a real backend::

    backend = StrictBackend(state_dir=tmp_path / "strict")          # 4 fake devices
    backend = StrictBackend(state_dir=..., inner=MyBackend(...))     # checks MyBackend's calls
    ...
    backend.assert_clean()   # raises AssertionError naming every broken promise

What it saw is kept in files under ``state_dir``, so a driver killed with SIGKILL and
started again (a new process) is judged across the restart: a harness calls
``StrictBackend.violations_in(state_dir)``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet
from dralet.cdi.spec import ContainerEdits
from dralet.node.backend import (
    AllocatedDevice,
    ClaimRef,
    Device,
    DeviceBackend,
    DeviceHealth,
    PreparedDevice,
)

__all__ = ["StrictBackend"]

MARK_KEY = "strictMark"
LEDGER_FILE = "strict.json"
VIOLATIONS_FILE = "strict-violations.log"


class StrictBackend:
    """A ``DeviceBackend`` that checks the state handed back to ``release``."""

    def __init__(
        self, *, state_dir: Path, inner: DeviceBackend | None = None, devices: int = 4
    ) -> None:
        self.state_dir = state_dir
        self.inner = inner
        self.count = devices
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._ledger = state_dir / LEDGER_FILE
        self._violations = state_dir / VIOLATIONS_FILE
        self._lock = dralet.FileLock(state_dir / "strict.lock")

    # ------------------------------------------------------------------ what it saw

    @staticmethod
    def violations_in(state_dir: Path) -> list[str]:
        try:
            return (state_dir / VIOLATIONS_FILE).read_text().splitlines()
        except FileNotFoundError:
            return []

    @property
    def violations(self) -> list[str]:
        return self.violations_in(self.state_dir)

    def assert_clean(self) -> None:
        if self.violations:
            raise AssertionError("backend contract broken:\n" + "\n".join(self.violations))

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data: dict[str, dict[str, Any]] = json.loads(self._ledger.read_text())
        except FileNotFoundError:
            return {}
        return data

    def _write(self, held: Mapping[str, Mapping[str, Any]]) -> None:
        dralet.atomic_write(self._ledger, json.dumps(held, sort_keys=True).encode())

    def _violation(self, message: str) -> None:
        with self._violations.open("a") as out:
            out.write(message + "\n")

    # ------------------------------------------------------------------ DeviceBackend

    async def devices(self) -> Sequence[Device]:
        if self.inner is not None:
            return await self.inner.devices()
        return [Device(name=f"dev-{i}") for i in range(self.count)]

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        inner = await self.inner.prepare(claim, device) if self.inner is not None else None
        async with self._lock.acquire():
            held = self._read()
            entry = held.get(device.device)
            live = entry if entry is not None and not entry.get("released") else None
            if live is not None and live["claim"] != claim.uid and not device.admin_access:
                self._violation(
                    f"{device.device} prepared for claim {claim.uid} while held by {live['claim']}"
                )
            if live is None or live["claim"] != claim.uid:
                # A first prepare: a fresh token. Again for the same claim: the same state.
                state = {**(dict(inner.state) if inner else {}), MARK_KEY: secrets.token_hex(8)}
                entry = {"claim": claim.uid, "state": state, "config": list(device.config)}
                held[device.device] = entry
                self._write(held)
            else:
                entry = live
        edits = (
            inner.edits
            if inner is not None
            else ContainerEdits(env=(f"STRICT_DEVICE={device.device}",))
        )
        return PreparedDevice(edits=edits, state=dict(entry["state"]))

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        async with self._lock.acquire():
            held = self._read()
            entry = held.get(device.device)
            if entry is not None and entry["claim"] == claim.uid:
                if dict(state) != entry["state"]:
                    self._violation(
                        f"release of {device.device} for claim {claim.uid} got state "
                        f"{dict(state)!r}, prepare returned {entry['state']!r}"
                    )
                if list(device.config) != entry["config"]:
                    self._violation(
                        f"release of {device.device} for claim {claim.uid} got config "
                        f"{list(device.config)!r}, prepare got {entry['config']!r}"
                    )
                # Kept as released: a release repeated after a crash must bring the
                # same state again.
                held[device.device] = {**entry, "released": True}
                self._write(held)
            elif state:
                self._violation(
                    f"release of {device.device} for claim {claim.uid} got state {dict(state)!r} "
                    "that no prepare of this claim returned"
                )
        if self.inner is not None:
            inner_state = {k: v for k, v in state.items() if k != MARK_KEY}
            await self.inner.release(claim, device, inner_state)

    async def devices_in_use(self) -> Mapping[str, str]:
        if self.inner is not None:
            return await self.inner.devices_in_use()
        async with self._lock.acquire():
            return {
                name: entry["claim"]
                for name, entry in self._read().items()
                if not entry.get("released")
            }

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        if self.inner is not None:
            return await self.inner.survives_reboot(device, state)
        return True

    async def health(self) -> Mapping[str, DeviceHealth]:
        return await self.inner.health() if self.inner is not None else {}
