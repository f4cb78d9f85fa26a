"""A strict fake backend: it fails the test when ``release_claim`` gets back a state other
than the one its ``prepare_claim`` returned, or when a device is prepared for two claims
at once.

The framework promises every backend that ``release_claim`` receives, for each device,
exactly the ``state`` that ``prepare_claim`` returned for that claim and device, and
the same configs (source, requests, parameters), after a partial failure, a crash at any
point, a reboot, or in fail-closed mode. A backend that ignores its state cannot notice
when that promise is broken; this one hands out a fresh token with every first prepare
and checks it.

Use it in a driver's own tests, alone or around a real ``ClaimBackend``::

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dralet
from dralet.cdi.spec import ContainerEdits
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimBackend,
    Device,
    DeviceConfig,
    DeviceHealth,
    HeldDevice,
    PartialPrepareError,
    PreparedDevice,
)
from dralet.node.claims.calls import Invoker

__all__ = ["StrictBackend"]

MARK_KEY = "strictMark"
LEDGER_FILE = "strict.json"
VIOLATIONS_FILE = "strict-violations.log"


def _configs(configs: Sequence[DeviceConfig]) -> list[list[Any]]:
    return [[c.source, list(c.requests), dict(c.parameters)] for c in configs]


class StrictBackend:
    """A ``ClaimBackend`` that checks the states and configs handed back to ``release_claim``."""

    def __init__(
        self, *, state_dir: Path, inner: ClaimBackend | None = None, devices: int = 4
    ) -> None:
        self.state_dir = state_dir
        self.inner = Invoker(inner, hit_failpoints=False) if inner is not None else None
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

    # ------------------------------------------------------------------ ClaimBackend

    async def devices(self) -> Sequence[Device]:
        """The inner backend's devices, or ``dev-0`` … ``dev-<devices-1>``."""
        if self.inner is not None:
            return await self.inner.devices()
        return [Device(name=f"dev-{i}") for i in range(self.count)]

    async def prepare_claim(self, allocation: ClaimAllocation) -> Sequence[PreparedDevice]:
        """The inner backend's results, each state marked with a token kept for release."""
        inner: Sequence[PreparedDevice | None] = [None] * len(allocation.devices)
        failure: PartialPrepareError | None = None
        if self.inner is not None:
            try:
                inner = await self.inner.prepare_claim(allocation)
            except PartialPrepareError as partial:
                inner, failure = partial.prepared, partial
        claim = allocation.claim
        results: list[PreparedDevice | None] = []
        async with self._lock.acquire():
            held = self._read()
            for device, result in zip(allocation.devices, inner, strict=True):
                if failure is not None and result is None:
                    results.append(None)
                    continue
                entry = held.get(device.device)
                live = entry if entry is not None and not entry.get("released") else None
                if live is not None and live["claim"] != claim.uid and not device.admin_access:
                    self._violation(
                        f"{device.device} prepared for claim {claim.uid} "
                        f"while held by {live['claim']}"
                    )
                if live is None or live["claim"] != claim.uid:
                    # A first prepare: a fresh token. Again for the same claim: the same state.
                    state = {
                        **(dict(result.state) if result else {}),
                        MARK_KEY: secrets.token_hex(8),
                    }
                    entry = {
                        "claim": claim.uid,
                        "state": state,
                        "config": _configs(device.configs),
                        "claimConfig": _configs(allocation.configs),
                    }
                    held[device.device] = entry
                else:
                    entry = live
                edits = (
                    result.edits
                    if result is not None
                    else ContainerEdits(env=(f"STRICT_DEVICE={device.device}",))
                )
                more = result.more_edits if result is not None else ()
                results.append(
                    PreparedDevice(edits=edits, state=dict(entry["state"]), more_edits=more)
                )
            self._write(held)
        if failure is not None:
            raise PartialPrepareError(failure.cause, results)
        return [r for r in results if r is not None]

    async def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Check each device's state and configs against what prepare saw, then release."""
        claim = allocation.claim
        async with self._lock.acquire():
            held = self._read()
            for device, state in zip(allocation.devices, states, strict=True):
                entry = held.get(device.device)
                if entry is not None and entry["claim"] == claim.uid:
                    self._check(allocation, device, state, entry)
                    # Kept as released: a release repeated after a crash must bring the
                    # same state again.
                    held[device.device] = {**entry, "released": True}
                elif state:
                    self._violation(
                        f"release of {device.device} for claim {claim.uid} got state "
                        f"{dict(state)!r} that no prepare of this claim returned"
                    )
            self._write(held)
        if self.inner is not None:
            inner_states = [{k: v for k, v in s.items() if k != MARK_KEY} for s in states]
            await self.inner.release_claim(allocation, inner_states)

    def _check(
        self,
        allocation: ClaimAllocation,
        device: AllocatedDevice,
        state: Mapping[str, Any],
        entry: Mapping[str, Any],
    ) -> None:
        where = f"release of {device.device} for claim {allocation.claim.uid}"
        if dict(state) != entry["state"]:
            self._violation(
                f"{where} got state {dict(state)!r}, prepare returned {entry['state']!r}"
            )
        if _configs(device.configs) != entry["config"]:
            self._violation(
                f"{where} got config {_configs(device.configs)!r}, prepare got {entry['config']!r}"
            )
        # The claim's configs may be fewer when fewer of its devices are released at once.
        if not set(map(repr, _configs(allocation.configs))) <= set(
            map(repr, entry.get("claimConfig", []))
        ):
            self._violation(
                f"{where} got claim configs {_configs(allocation.configs)!r}, "
                f"prepare got {entry.get('claimConfig')!r}"
            )

    async def devices_in_use(self) -> Mapping[str, Collection[str]]:
        """The inner backend's answer, or the devices prepared and not released."""
        if self.inner is not None:
            return await self.inner.devices_in_use()
        async with self._lock.acquire():
            return {
                name: {entry["claim"]}
                for name, entry in self._read().items()
                if not entry.get("released")
            }

    async def restore_held(self, held: Sequence[HeldDevice]) -> None:
        """Passed on to the inner backend, without the tokens this one adds to states."""
        if self.inner is not None:
            await self.inner.restore_held(
                lambda: [
                    replace(h, state={k: v for k, v in h.state.items() if k != MARK_KEY})
                    for h in held
                ]
            )

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """The inner backend's answer (True without one)."""
        if self.inner is not None:
            inner_state = {k: v for k, v in state.items() if k != MARK_KEY}
            return await self.inner.survives_reboot(device, inner_state)
        return True

    async def health(self) -> Mapping[str, DeviceHealth]:
        """The inner backend's health (nothing without one)."""
        return await self.inner.health() if self.inner is not None else {}
