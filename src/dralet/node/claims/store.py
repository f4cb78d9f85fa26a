"""The durable claim records and the locks around them, over ``dralet.checkpoint``.

This is the engine's one door to the checkpoint: ``load`` reads the truth from disk,
``put``/``drop``/``update`` change it under the node-wide checkpoint lock, and
``claim_lock`` serialises all work on one claim (in-process and with a ``flock`` shared
by any other driver instance on the node). Nothing is trusted from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from dralet import fsutil
from dralet.checkpoint import store as checkpoint_store
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState
from dralet.metrics import DriverMetrics
from dralet.node.settings import DriverSettings

__all__ = ["RecordStore", "now_stamp"]


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RecordStore:
    def __init__(self, settings: DriverSettings, *, boot_id: str, metrics: DriverMetrics) -> None:
        self.settings = settings
        self.boot_id = boot_id
        self.metrics = metrics
        self.checkpoints = checkpoint_store.CheckpointStore(settings.checkpoint_path)
        self._cache: tuple[bytes, Checkpoint] | None = None
        self._checkpoint_lock = asyncio.Lock()
        self._checkpoint_flock = fsutil.FileLock(settings.plugin_dir / "checkpoint.lock")
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._lock_dir_ready = False

    def load(self) -> Checkpoint:
        """The checkpoint as stored now (raises ``CheckpointCorruptError``).

        The file is read every time (another driver instance may have written it); it is
        parsed again only when its bytes differ from the last ones parsed.
        """
        raw = self.checkpoints.read_raw()
        if raw is None:
            self._cache = None
            return Checkpoint(driver=self.settings.driver_name, boot_id=self.boot_id)
        if self._cache is not None and self._cache[0] == raw:
            return self._cache[1]
        checkpoint = self.checkpoints.decode(raw)
        self._cache = (raw, checkpoint)
        return checkpoint

    def forget_cache(self) -> None:
        self._cache = None

    async def update(self, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        """Read-modify-write under the node-wide checkpoint lock; saved atomically."""
        async with self._checkpoint_lock, self._checkpoint_flock.acquire():
            current = self.load()
            new = change(current)
            if new is not current:
                new = replace(new, driver=self.settings.driver_name, boot_id=self.boot_id)
                raw = self.checkpoints.save(new)
                self._cache = (raw, new)
                self.metrics.claims_prepared.set(
                    sum(1 for r in new.claims.values() if r.state == ClaimState.PREPARE_COMPLETED)
                )
            return new

    async def put(self, record: ClaimRecord) -> ClaimRecord:
        record = replace(record, updated_at=now_stamp())
        await self.update(lambda cp: cp.with_claim(record))
        return record

    async def drop(self, uid: str) -> None:
        await self.update(lambda cp: cp.without_claim(uid) if uid in cp.claims else cp)

    @contextlib.asynccontextmanager
    async def claim_lock(self, uid: str) -> AsyncIterator[None]:
        lock = self._claim_locks.setdefault(uid, asyncio.Lock())
        try:
            async with lock:
                if not self._lock_dir_ready:
                    fsutil.ensure_private_dir(self.settings.lock_dir)
                    self._lock_dir_ready = True
                async with fsutil.FileLock(self.settings.lock_dir / f"{uid}.lock").acquire(
                    remove=True
                ):
                    yield
        finally:
            if not lock.locked() and self._claim_locks.get(uid) is lock:
                del self._claim_locks[uid]
