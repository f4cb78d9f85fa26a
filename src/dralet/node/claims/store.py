"""A claim's durable files: its record (over ``dralet.checkpoint.database``) with the
locks around it, and its CDI spec.

This is the engine's one door to the records. Reads (``record``, ``snapshot``) ask the
database every time: another driver instance on the node may have written it. Writes
(``put``, ``intent``, ``drop``, ``commit``) go to one writer thread that commits every
write waiting for it in a single transaction: the claims of a call that reach the same
step together are made durable by one fsync (group commit), and no fsync ever runs on
the event loop. ``claim_lock`` serialises all work on one claim, in-process and with a
``flock`` shared by any other driver instance on the node.

A claim's CDI spec is built from what the backend returned (``build_spec``), then
written and removed the same way (``SpecWriter``): the specs of claims that reach the
step together are written (temp file, fsync, rename) one after the other by one thread,
and their directory is fsynced once for all of them (``SpecStore.apply``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from dralet import fsutil
from dralet.batches import BatchThread, in_groups, settle_future
from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.cdi.store import SpecChange, SpecStamp, SpecStore, WrittenSpec
from dralet.checkpoint import database
from dralet.checkpoint.database import Drop, Intent, Op, Put, Snapshot
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord, evolve
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef, PreparedDevice
from dralet.node.claims import devicemetadata, records
from dralet.node.claims.records import now_stamp
from dralet.node.settings import DriverSettings

__all__ = ["RecordStore", "SpecWriter", "build_spec", "external_id_problem"]

MAX_BATCH = 4096
"""Most writes one transaction carries; more wait for the next one."""


class RecordStore:
    def __init__(self, settings: DriverSettings, *, boot_id: str, metrics: DriverMetrics) -> None:
        self.settings = settings
        self.boot_id = boot_id
        self.metrics = metrics
        self.db = database.RecordDatabase(
            settings.store_path, legacy=settings.checkpoint_path, driver=settings.driver_name
        )
        self._writer = self._new_writer()
        self._kept: dict[str, str] = {}
        """Unusable file → the copy ``keep_aside`` linked for it."""
        self._claim_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        """Claim UID → its in-process lock and how many hold it or wait for it: the lock
        is forgotten only when nobody does (one given back is still its waiter's)."""
        self._node_locks = fsutil.KeyedLocks(settings.claim_lock_path)
        self._dir_ready = False
        self._pending_reads: list[tuple[str, asyncio.Future[tuple[ClaimRecord | None, str]]]] = []

    # ------------------------------------------------------------------ reading

    def record(self, uid: str) -> tuple[ClaimRecord | None, str]:
        """The claim's record as stored now, or ``(None, why)`` when it is corrupt.

        Raises ``CheckpointCorruptError`` when the store as a whole is unusable.
        """
        return self.db.read(uid)

    async def record_now(self, uid: str) -> tuple[ClaimRecord | None, str]:
        """``record``, read in one query with the reads other claims ask for in the same
        turn of the event loop (a 1,000-claim call, recovery): call it with the claim's
        lock held, so the read comes after the lock, as ``record`` would."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[ClaimRecord | None, str]] = loop.create_future()
        if not self._pending_reads:
            loop.call_soon(self._read_pending)
        self._pending_reads.append((uid, future))
        return await future

    def _read_pending(self) -> None:
        pending, self._pending_reads = self._pending_reads, []
        try:
            found = self.db.read_many([uid for uid, _ in pending])
        except Exception as exc:  # noqa: BLE001 - every reader gets the store's error
            for _, future in pending:
                settle_future(future, exc)
            return
        for uid, future in pending:
            settle_future(future, found[uid])

    def records_now(
        self, uids: Sequence[str], *, known: Snapshot | None = None
    ) -> dict[str, tuple[ClaimRecord | None, str]]:
        """``record`` of several claims in one query (call with their locks held); rows
        unchanged since ``known`` are not decoded again."""
        return self.db.read_many(uids, known=known)

    def open(self) -> Snapshot:
        """Create the database if needed (taking over ``checkpoint.json``); every record."""
        self.db.open()
        return self.db.snapshot()

    def snapshot(self) -> Snapshot:
        """Every record (node-wide work: recovery, stale claims, audit)."""
        return self.db.snapshot()

    def checkpoint(self) -> None:
        """Copy the log's commits into the database file (blocking; after recovery)."""
        self.db.checkpoint()

    # ------------------------------------------------------------------ writing

    def _new_writer(self) -> BatchThread[Sequence[Op], list[BaseException | None]]:
        return BatchThread(
            "dralet-claim-store", in_groups(self._commit), max_batch=MAX_BATCH, size=len
        )

    def _commit(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """The writer thread's work: every waiting write in ONE transaction."""
        started = time.perf_counter()
        results = self.db.apply(ops)
        self.metrics.store_commits.inc()
        self.metrics.store_commit_seconds.observe(time.perf_counter() - started)
        return results

    async def commit(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """Make ``ops`` durable together with whatever else is waiting; a result per op."""
        if not ops:  # (a group whose claims all failed or went on alone) no empty commit
            return []
        return await self._writer.submit(ops)

    async def _one(self, op: Op) -> None:
        (result,) = await self.commit([op])
        if result is not None:
            raise result

    async def put(self, record: ClaimRecord) -> ClaimRecord:
        """Store ``record``; the record as stored."""
        record = evolve(record, updated_at=now_stamp())
        await self._one(Put(record))
        return record

    async def put_many(self, records: Sequence[ClaimRecord]) -> list[ClaimRecord | BaseException]:
        """``put`` of several records in one hand-over; each stored record or its error."""
        return await self._many([evolve(r, updated_at=now_stamp()) for r in records], Put)

    async def intents(self, records: Sequence[ClaimRecord]) -> list[ClaimRecord | BaseException]:
        """``intent`` of several records in one hand-over; each record or its error."""
        return await self._many(records, Intent)

    async def _many(
        self, records: Sequence[ClaimRecord], op: Callable[[ClaimRecord], Op]
    ) -> list[ClaimRecord | BaseException]:
        try:
            results = await self.commit([op(r) for r in records])
        except Exception as exc:  # noqa: BLE001 - the writer failed every one of them
            return [exc] * len(records)
        return [r if e is None else e for r, e in zip(records, results, strict=True)]

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

    def count_released(self) -> float:
        """Claims torn down whose finalizer removal is still owed (the
        ``dralet_finalizer_removals_owed`` gauge)."""
        try:
            return float(self.db.count(ClaimState.RELEASED.value))
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
        self._writer = self._new_writer()
        self.db.open()

    # ------------------------------------------------------------------ claim locks

    @contextlib.asynccontextmanager
    async def claim_locks(self, uids: Sequence[str]) -> AsyncIterator[None]:
        """``claim_lock`` of several claims at once, taken in UID order (so two holders
        of several never wait on each other in a circle)."""
        held: list[tuple[str, asyncio.Lock]] = []  # not an AsyncExitStack: 10,000 at a reboot
        try:
            for uid in sorted(set(uids)):
                held.append((uid, await self.lock_claim(uid)))
            yield
        finally:
            failure: BaseException | None = None
            for uid, lock in reversed(held):
                try:
                    self.unlock_claim(uid, lock)
                except BaseException as exc:  # noqa: BLE001 - the others are still given back
                    failure = failure or exc
            if failure is not None:
                raise failure

    def claim_lock(self, uid: str) -> ClaimLock:
        """``async with``: all work on the claim, serialised in-process and with every
        other driver instance on the node."""
        return ClaimLock(self, uid)

    async def lock_claim(self, uid: str) -> asyncio.Lock:
        """Take the claim's locks (``claim_lock`` uses it); the in-process one taken."""
        lock, users = self._claim_locks.get(uid) or (asyncio.Lock(), 0)
        self._claim_locks[uid] = (lock, users + 1)
        try:
            await lock.acquire()
            try:
                if not self._dir_ready:
                    fsutil.ensure_private_dir(self.settings.plugin_dir)
                    self._dir_ready = True
                await self._node_locks.lock(uid)
            except BaseException:
                lock.release()
                raise
        except BaseException:
            self._forget_lock(uid, lock)
            raise
        return lock

    def unlock_claim(self, uid: str, lock: asyncio.Lock) -> None:
        try:
            self._node_locks.unlock(uid)
        finally:
            lock.release()
            self._forget_lock(uid, lock)

    def _forget_lock(self, uid: str, lock: asyncio.Lock) -> None:
        """One user of the claim's lock is done with it (holding or waiting)."""
        held, users = self._claim_locks[uid]
        assert held is lock, f"claim {uid}: a lock that is not its own given back"
        if users > 1:
            self._claim_locks[uid] = (lock, users - 1)
        else:
            del self._claim_locks[uid]


class ClaimLock:
    """``RecordStore.claim_lock``: a class rather than a generator-based context
    manager, as every claim of a 1,000-claim call takes one."""

    __slots__ = ("_lock", "_store", "_uid")

    def __init__(self, store: RecordStore, uid: str) -> None:
        self._store = store
        self._uid = uid
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        self._lock = await self._store.lock_claim(self._uid)

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._lock is not None
        lock, self._lock = self._lock, None
        self._store.unlock_claim(self._uid, lock)


class SpecWriter:
    def __init__(self, specs: SpecStore) -> None:
        self.specs = specs
        self._thread: BatchThread[Sequence[SpecChange], list[WrittenSpec | bool | BaseException]]
        self._thread = BatchThread("dralet-cdi-specs", in_groups(specs.apply), size=len)

    async def _one(self, change: SpecChange) -> WrittenSpec | bool:
        (result,) = await self._thread.submit([change])
        if isinstance(result, BaseException):
            raise result
        return result

    async def write(
        self, claim_uid: str, document: dict[str, Any], *, checked: bool = False
    ) -> SpecStamp:
        """The claim's spec, durable once this returns; the written file's stamp.
        ``checked`` as ``SpecChange.checked``."""
        written = await self._one(SpecChange(claim_uid, document, checked))
        assert isinstance(written, WrittenSpec)
        return written.stamp

    async def write_many(
        self, documents: Sequence[tuple[str, dict[str, Any]]], *, checked: bool = False
    ) -> list[SpecStamp | BaseException]:
        """Several claims' specs (claim UID, document), each durable or failed alone,
        handed to the writer as one piece of work; ``checked`` as ``SpecChange.checked``."""
        if not documents:
            return []
        changes = [SpecChange(uid, document, checked) for uid, document in documents]
        try:
            results = await self._thread.submit(changes)
        except Exception as exc:  # noqa: BLE001 - the writer failed them all
            return [exc] * len(changes)
        return [r.stamp if isinstance(r, WrittenSpec) else _failure(r) for r in results]

    async def remove(self, claim_uid: str) -> bool:
        """The claim's spec gone for good once this returns; whether it was there."""
        return bool(await self._one(SpecChange(claim_uid, None)))

    async def remove_many(self, claim_uids: Sequence[str]) -> list[bool | BaseException]:
        """Several claims' specs removed, each for good or failed alone, handed to the
        writer as one piece of work; whether each was there."""
        if not claim_uids:
            return []
        try:
            results = await self._thread.submit([SpecChange(uid, None) for uid in claim_uids])
        except Exception as exc:  # noqa: BLE001 - the writer failed them all
            return [exc] * len(claim_uids)
        return [r if isinstance(r, BaseException) else bool(r) for r in results]

    def stop(self) -> None:
        self._thread.stop()


def _failure(result: bool | BaseException) -> BaseException:
    if isinstance(result, BaseException):
        return result
    return AssertionError("a spec write answered as a removal")


def external_id_problem(ids: Sequence[str], kind: str) -> str:
    """Why the backend's external CDI ids cannot be given to the kubelet, if so."""
    for external in ids:
        try:
            parsed = cdi_names.parse_qualified_name(external)
        except cdi_names.CDINameError as exc:
            return f"external CDI id {external!r}: {exc}"
        if parsed.kind == kind:
            return (
                f"external CDI id {external!r} has the driver's own kind "
                f"{kind}: its specs are dralet's to write"
            )
    return ""


def build_spec(
    settings: DriverSettings,
    metadata_files: devicemetadata.MetadataFiles,
    ref: ClaimRef,
    devices: Sequence[DeviceRecord],
    results: Sequence[PreparedDevice],
    metadata: Mapping[str, str],
    claim: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The claim's CDI spec: a CDI device per device (and per further edits); the
    device metadata mounts go with each request's first device."""
    mounts = (
        devicemetadata.mounts(
            settings.driver_name, ref, devices, list(metadata), metadata_files, claim
        )
        if metadata
        else {}
    )
    cdi_devices = []
    for index, (d, r) in enumerate(zip(devices, results, strict=True)):
        edits = r.edits
        if index in mounts:
            edits = edits.merged(cdi_spec.ContainerEdits(mounts=tuple(mounts[index])))
        names = records.cdi_names(records.cdi_device_name(ref.uid, d), len(r.more_edits))
        for name, device_edits in zip(names, (edits, *r.more_edits), strict=True):
            cdi_devices.append(cdi_spec.CDIDevice(name=name, container_edits=device_edits))
    # Validated here, as a value: the spec store then writes it without parsing the
    # document back (``to_json`` is pinned to ``from_json`` by a property test).
    return cdi_spec.to_json(cdi_spec.Spec(kind=settings.cdi_kind, devices=tuple(cdi_devices)))
