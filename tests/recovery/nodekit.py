"""An in-process node for claim engine tests: real files, a simulated GPU backend, claims in
memory (``dralet.testing``), and ``restart()`` to play a new driver process over the same
directories.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dralet import failpoints
from dralet.checkpoint.model import Checkpoint, ClaimRecord
from dralet.drivers.example import SimulatedGPUs
from dralet.node import audit
from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from dralet.node.claims import ClaimEngine, PrepareOutcome
from dralet.node.claims.calls import finalizer_name
from dralet.node.settings import DriverSettings
from dralet.testing import (
    MemoryClaims,
    MemoryDevices,
    StrictBackend,
    audit_findings,
    claim_ref,
    node_settings,
)
from dralet.testing.claims import DRIVER, NODE, allocated_claim

FINALIZER = finalizer_name(DRIVER)


@dataclass
class EngineNode:
    root: Path
    settings: DriverSettings
    claims: MemoryClaims
    backend: SimulatedGPUs | GatedBackend
    engine: ClaimEngine
    refs: dict[str, ClaimRef] = field(default_factory=dict)
    strict: StrictBackend | None = None
    """Set: the engine talks to a strict backend around the GPUs, which checks that
    ``release`` gets back what ``prepare`` returned."""
    _threads: ThreadPoolExecutor | None = None
    """The event loop's default executor, this node's own (``restart`` waits for it)."""

    @classmethod
    def create(
        cls, root: Path, *, gpus: int = 4, strict: bool = False, **settings: Any
    ) -> EngineNode:
        s = node_settings(root, **settings)
        claims = MemoryClaims()
        backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=gpus)
        checked = StrictBackend(state_dir=root / "strict", inner=backend) if strict else None
        engine = ClaimEngine(s, backend=checked or backend, claims=claims)
        node = cls(root, s, claims, backend, engine, strict=checked)
        node._threads = _own_threads()
        return node

    def restart(self, *, survives_reboot: bool = True, boot_id: str | None = None) -> ClaimEngine:
        """A new driver process on the same node: nothing is kept in memory."""
        assert isinstance(self.backend, SimulatedGPUs), "a gated node does not restart"
        if boot_id is not None:
            (self.root / "boot_id").write_text(boot_id + "\n")
        self.engine.store.shutdown()  # a process that went away holds no files open
        # An in-process "kill" cannot stop a thread: what the old process's threads were
        # doing (a backend prepare beside a finalizer patch) ends before the new process
        # starts, as if it had happened just before the kill.
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = _own_threads()
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
        ref = self.refs[name] = claim_ref(claim)
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
        return await audit_findings(self.settings, self.backend, claims=self.claims)


class GatedBackend(MemoryDevices):
    """``count`` memory devices whose ``prepare`` of chosen devices waits for an event to
    be set; ``events`` tells the order the calls came in and finished."""

    def __init__(self, count: int, *, gates: Mapping[str, asyncio.Event]) -> None:
        super().__init__(count)
        self.gates = dict(gates)
        self.entered: dict[str, asyncio.Event] = {d: asyncio.Event() for d in gates}
        self.events: list[str] = []

    def in_use(self) -> dict[str, str]:
        return dict(self.held)

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        self.events.append(f"prepare-start {claim.name} {device.device}")
        gate = self.gates.get(device.device)
        if gate is not None:
            self.entered[device.device].set()
            await gate.wait()
        result = await super().prepare(claim, device)
        self.events.append(f"prepare-done {claim.name} {device.device}")
        return result

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        self.events.append(f"release {claim.name or claim.uid} {device.device}")
        await super().release(claim, device, state)


def _own_threads() -> ThreadPoolExecutor | None:
    """A default executor for the running event loop, to wait for at a restart."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    threads = ThreadPoolExecutor(thread_name_prefix="enginenode")
    loop.set_default_executor(threads)
    return threads


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
