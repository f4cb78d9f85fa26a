"""The durable claim records and the locks around them, over ``dralet.checkpoint.database``.

This is the engine's one door to the records. Reads (``record``, ``snapshot``) ask the
database every time: another driver instance on the node may have written it. Writes
(``put``, ``intent``, ``drop``, ``commit``) go to one writer thread that commits every
write waiting for it in a single transaction: the claims of a call that reach the same
step together are made durable by one fsync (group commit), and no fsync ever runs on
the event loop. ``claim_lock`` serialises all work on one claim, in-process and with a
``flock`` shared by any other driver instance on the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from dralet import errors, fsutil
from dralet.checkpoint import database
from dralet.checkpoint.database import Drop, Intent, Op, Put, Snapshot
from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.metrics import DriverMetrics
from dralet.node.settings import DriverSettings

__all__ = ["RecordStore", "now_stamp"]

MAX_BATCH = 4096
"""Most writes one transaction carries; more wait for the next one."""


_stamp: tuple[int, str] = (0, "")


def now_stamp() -> str:
    """UTC now to the second, as records carry it (formatted once per second)."""
    global _stamp
    second = int(time.time())
    if _stamp[0] != second:
        _stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _stamp[1]


@dataclass
class _Pending:
    ops: Sequence[Op]
    future: asyncio.Future[list[BaseException | None]]
    loop: asyncio.AbstractEventLoop


class _Writer:
    """The one thread that writes: takes every pending write, commits them together."""

    def __init__(self, db: database.RecordDatabase, metrics: DriverMetrics) -> None:
        self.db = db
        self.metrics = metrics
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopped = False

    def submit(self, pending: _Pending) -> None:
        with self._start_lock:
            if self._stopped:
                raise errors.TemporaryError("the claim store is closed (driver stopping)")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="dralet-claim-store", daemon=True
                )
                self._thread.start()
        self._queue.put(pending)

    def stop(self) -> None:
        with self._start_lock:
            self._stopped = True
            if self._thread is not None and self._thread.is_alive():
                self._queue.put(None)
                self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            ops = len(first.ops)
            while ops < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
                ops += len(item.ops)
            self._commit(batch)

    def _commit(self, batch: list[_Pending]) -> None:
        all_ops = [op for p in batch for op in p.ops]
        started = time.perf_counter()
        try:
            results = self.db.apply(all_ops)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
            for p in batch:
                _resolve(p, exc)
            return
        self.metrics.store_commits.inc()
        self.metrics.store_commit_seconds.observe(time.perf_counter() - started)
        for p in batch:
            mine, results = results[: len(p.ops)], results[len(p.ops) :]
            _resolve(p, mine)


def _resolve(p: _Pending, outcome: list[BaseException | None] | BaseException) -> None:
    def settle() -> None:
        if p.future.done():
            return
        if isinstance(outcome, BaseException):
            p.future.set_exception(outcome)
        else:
            p.future.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        p.loop.call_soon_threadsafe(settle)


class RecordStore:
    def __init__(self, settings: DriverSettings, *, boot_id: str, metrics: DriverMetrics) -> None:
        self.settings = settings
        self.boot_id = boot_id
        self.metrics = metrics
        self.db = database.RecordDatabase(
            settings.store_path, legacy=settings.checkpoint_path, driver=settings.driver_name
        )
        self._writer = _Writer(self.db, metrics)
        self._kept: dict[str, str] = {}
        """Unusable file → the copy ``keep_aside`` linked for it."""
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._node_locks = fsutil.KeyedLocks(settings.claim_lock_path)
        self._dir_ready = False

    # ------------------------------------------------------------------ reading

    def record(self, uid: str) -> tuple[ClaimRecord | None, str]:
        """The claim's record as stored now, or ``(None, why)`` when it is corrupt.

        Raises ``CheckpointCorruptError`` when the store as a whole is unusable.
        """
        return self.db.read(uid)

    def open(self) -> Snapshot:
        """Create the database if needed (taking over ``checkpoint.json``); every record."""
        self.db.open()
        return self.db.snapshot()

    def snapshot(self) -> Snapshot:
        """Every record (node-wide work: recovery, stale claims, audit)."""
        return self.db.snapshot()

    # ------------------------------------------------------------------ writing

    async def commit(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """Make ``ops`` durable together with whatever else is waiting; a result per op."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[BaseException | None]] = loop.create_future()
        self._writer.submit(_Pending(ops, future, loop))
        return await future

    async def _one(self, op: Op) -> None:
        (result,) = await self.commit([op])
        if result is not None:
            raise result

    async def put(self, record: ClaimRecord) -> ClaimRecord:
        record = replace(record, updated_at=now_stamp())
        await self._one(Put(record))
        return record

    async def intent(self, record: ClaimRecord) -> None:
        """Record a ``PrepareStarted`` record; ``DeviceBusyError`` if a device is held."""
        await self._one(Intent(record))

    async def drop(self, uid: str) -> None:
        await self._one(Drop(uid))

    def count_prepared(self) -> float:
        """Claims recorded as prepared now (the ``dralet_claims_prepared`` gauge)."""
        try:
            return float(self.db.count(ClaimState.PREPARE_COMPLETED.value))
        except Exception:  # noqa: BLE001 - a scrape never fails on an unusable store
            return float("nan")

    async def close(self) -> None:
        """Stop the writer thread (after the writes already handed to it), close the files."""
        await asyncio.to_thread(self.shutdown)

    def shutdown(self) -> None:
        """``close``, blocking: for a process that is going away."""
        self._writer.stop()
        self.db.close()
        self._node_locks.close()

    # ------------------------------------------------------------------ unusable store

    def keep_aside(self, path: str) -> str | None:
        """Keep an unusable store file aside for forensics (a second hard link of it and
        of its SQLite log, nothing read); returns where, or None. Never raises. The
        original stays, so a restart fails closed again instead of starting from a
        silently empty state. A directory cannot be linked: ``reset`` moves it aside."""
        if path in self._kept:
            return self._kept[path]
        target = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("-wal", ""):  # the database last: its link marks the copy done
            try:
                os.link(f"{path}{suffix}", f"{target}{suffix}", follow_symlinks=False)
            except FileExistsError:
                pass
            except OSError:
                if not suffix:
                    return None
        with contextlib.suppress(OSError):
            fsutil.fsync_dir(self.settings.plugin_dir)
        self._kept[path] = target
        return target

    def reset(self) -> None:
        """Start empty (only once nothing is prepared). Each unusable file leaves: a kept
        copy already exists, or it is moved aside under that name."""
        self._writer.stop()
        self.db.close()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for entry in (*self.db.files(), self.settings.checkpoint_path):
            name = str(entry)
            if not os.path.lexists(name):
                continue
            kept = self._kept.get(name) or self._kept.get(name.removesuffix("-wal"))
            if kept is not None and not os.path.isdir(name):
                os.unlink(name)
            else:
                os.rename(name, f"{name}.corrupt-{stamp}")
        fsutil.fsync_dir(self.settings.plugin_dir)
        self._kept.clear()
        self.db = database.RecordDatabase(
            self.settings.store_path, driver=self.settings.driver_name
        )
        self._writer = _Writer(self.db, self.metrics)
        self.db.open()

    # ------------------------------------------------------------------ claim locks

    @contextlib.asynccontextmanager
    async def claim_lock(self, uid: str) -> AsyncIterator[None]:
        lock = self._claim_locks.setdefault(uid, asyncio.Lock())
        try:
            async with lock:
                if not self._dir_ready:
                    fsutil.ensure_private_dir(self.settings.plugin_dir)
                    self._dir_ready = True
                async with self._node_locks.acquire(uid):
                    yield
        finally:
            if not lock.locked() and self._claim_locks.get(uid) is lock:
                del self._claim_locks[uid]
