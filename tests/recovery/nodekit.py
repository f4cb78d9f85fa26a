"""An in-process node for claim engine tests: real files, a simulated GPU backend, claims in
memory, and ``restart()`` to play a new driver process over the same directories.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dralet import failpoints
from dralet.checkpoint.model import Checkpoint, ClaimRecord
from dralet.drivers.example import SimulatedGPUs
from dralet.node import audit
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    ClaimUID,
    PartialPrepareError,
    PreparedDevice,
)
from dralet.node.claims import ClaimEngine, PrepareOutcome
from dralet.node.settings import DriverSettings
from dralet.testing.claims import DRIVER, NODE, MemoryClaims, allocated_claim
from dralet.testing.strict import StrictBackend

FINALIZER = f"{DRIVER}/prepared"


def node_settings(root: Path, **overrides: Any) -> DriverSettings:
    values: dict[str, Any] = {
        "driver_name": DRIVER,
        "node_name": NODE,
        "plugin_dir": root / "plugins" / DRIVER,
        "registry_dir": root / "plugins_registry",
        "cdi_dir": root / "cdi",
        "boot_id_path": root / "boot_id",
    }
    values.update(overrides)
    if not (root / "boot_id").exists():
        (root / "boot_id").write_text("boot-1\n")
    return DriverSettings(**values)


class ClaimLister:
    """``audit.ClaimLister`` over ``MemoryClaims``."""

    def __init__(self, claims: MemoryClaims) -> None:
        self.claims = claims

    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        return list(self.claims.objects.values())


@dataclass
class EngineNode:
    root: Path
    settings: DriverSettings
    claims: MemoryClaims
    backend: SimulatedGPUs
    engine: ClaimEngine
    refs: dict[str, ClaimRef] = field(default_factory=dict)
    strict: StrictBackend | None = None
    """Set: the engine talks to a strict backend around the GPUs, which checks that
    ``release`` gets back what ``prepare`` returned."""

    @classmethod
    def create(
        cls, root: Path, *, gpus: int = 4, strict: bool = False, **settings: Any
    ) -> EngineNode:
        s = node_settings(root, **settings)
        claims = MemoryClaims()
        backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=gpus)
        checked = StrictBackend(state_dir=root / "strict", inner=backend) if strict else None
        engine = ClaimEngine(s, backend=checked or backend, claims=claims)
        return cls(root, s, claims, backend, engine, strict=checked)

    def restart(self, *, survives_reboot: bool = True, boot_id: str | None = None) -> ClaimEngine:
        """A new driver process on the same node: nothing is kept in memory."""
        if boot_id is not None:
            (self.root / "boot_id").write_text(boot_id + "\n")
        self.engine.store.shutdown()  # a process that went away holds no files open
        self.backend = SimulatedGPUs(
            state_dir=self.root / "gpus",
            node_name=NODE,
            count=self.backend.count,
            survives_reboot=survives_reboot,
        )
        if self.strict is not None:
            self.strict = StrictBackend(state_dir=self.root / "strict", inner=self.backend)
        self.engine = ClaimEngine(
            self.settings, backend=self.strict or self.backend, claims=self.claims
        )
        return self.engine

    def add_claim(self, name: str, *devices: str, namespace: str = "default") -> ClaimRef:
        claim = self.claims.add(
            allocated_claim(
                name, namespace=namespace, devices=[(f"r{i}", d) for i, d in enumerate(devices)]
            )
        )
        meta = claim["metadata"]
        ref = ClaimRef(ClaimUID(meta["uid"]), meta["namespace"], meta["name"])
        self.refs[name] = ref
        return ref

    async def prepare(self, *refs: ClaimRef) -> dict[str, PrepareOutcome]:
        return await self.engine.prepare(refs)

    async def unprepare(self, *refs: ClaimRef) -> dict[str, str]:
        """The answers, once the finalizer removals they owe are done too."""
        answers = await self.engine.unprepare(refs)
        await self.engine.settled()
        return answers

    def checkpoint(self) -> Checkpoint:
        return self.engine.snapshot().checkpoint

    def record(self, ref: ClaimRef) -> ClaimRecord | None:
        return self.checkpoint().claims.get(ref.uid)

    def spec_path(self, ref: ClaimRef) -> Path:
        return self.engine.specs.path_for(ref.uid)

    def finalizers(self, ref: ClaimRef) -> list[str]:
        return self.claims.finalizers(ref.namespace, ref.name)

    def held_by(self, ref: ClaimRef) -> list[str]:
        return sorted(d for d, uid in self.backend.in_use().items() if uid == ref.uid)

    def assert_gone(self, ref: ClaimRef) -> None:
        """Nothing of the claim is left on the node or on its API object."""
        assert self.record(ref) is None
        assert not self.spec_path(ref).exists()
        assert self.held_by(ref) == []
        assert FINALIZER not in self.finalizers(ref)

    def assert_prepared(self, ref: ClaimRef, *devices: str) -> None:
        record = self.record(ref)
        assert record is not None
        assert record.state == "PrepareCompleted"
        assert self.spec_path(ref).is_file()
        assert self.held_by(ref) == sorted(devices)
        assert FINALIZER in self.finalizers(ref)

    async def findings(self) -> list[audit.Finding]:
        snapshot = await audit.take_snapshot(
            self.settings, backend=self.backend, claims=ClaimLister(self.claims)
        )
        return audit.find_inconsistencies(snapshot)


class GatedBackend:
    """Wraps a backend; ``prepare`` of chosen devices waits for an event to be set."""

    def __init__(self, inner: SimulatedGPUs, *, gates: Mapping[str, asyncio.Event]) -> None:
        self.inner = inner
        self.gates = dict(gates)
        self.entered: dict[str, asyncio.Event] = {d: asyncio.Event() for d in gates}
        self.events: list[str] = []

    async def devices(self) -> Any:
        return await self.inner.devices()

    async def prepare_claim(self, allocation: ClaimAllocation) -> list[PreparedDevice]:
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
        for device, state in zip(allocation.devices, states, strict=True):
            await self.release(allocation.claim, device, state)

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        self.events.append(f"prepare-start {claim.name} {device.device}")
        gate = self.gates.get(device.device)
        if gate is not None:
            self.entered[device.device].set()
            await gate.wait()
        result = await self.inner.prepare(claim, device)
        self.events.append(f"prepare-done {claim.name} {device.device}")
        return result

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        self.events.append(f"release {claim.name or claim.uid} {device.device}")
        await self.inner.release(claim, device, state)

    async def devices_in_use(self) -> Mapping[str, str]:
        return await self.inner.devices_in_use()

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return await self.inner.survives_reboot(device, state)

    async def health(self) -> Any:
        return await self.inner.health()


class SimulatedCrash(BaseException):
    """The process 'dies' at a failpoint: no ``except Exception`` cleanup runs."""


@contextlib.contextmanager
def crash_at(name: str, *, nth: int = 1) -> Iterator[None]:
    """Make the ``nth`` hit of failpoint ``name`` behave like kill -9 of the driver.

    Only ``finally`` blocks run as the crash unwinds (as the kernel drops flocks when a
    process dies); every durable step before the failpoint stays, none after it happens.
    """
    real_hit = failpoints.hit
    seen = 0

    def hit(point: str) -> None:
        nonlocal seen
        if point == name:
            seen += 1
            if seen == nth:
                raise SimulatedCrash(point)
        real_hit(point)

    failpoints.hit = hit  # type: ignore[assignment]
    try:
        yield
    finally:
        failpoints.hit = real_hit


"""The old name of ``EngineNode``, kept until every caller says ``EngineNode``."""
