"""The claim record database: one row per claim in SQLite (WAL), committed in groups.

Why SQLite: recording one claim's transition writes that claim's row only, a whole
batch of transitions is one transaction and so one fsync of the write-ahead log, two
driver instances on one node (a rolling update) share it safely through SQLite's own
locking, and it ships with Python. A device's exclusive holder is a row of its own
(``holds``), checked and taken in the same transaction as the claim's intent, so
exclusivity never needs a scan.

Each claim row keeps the checksum envelope of the file format before it: the record's
canonical JSON and a SHA-256 over the claim UID and that exact string. A row that fails
it is reported as corrupt for that claim alone (``Snapshot.corrupt``); the claim's
``holds`` rows stay, so its devices cannot be given to another claim meanwhile. A file
SQLite itself cannot read makes the whole store unusable
(``CheckpointCorruptError``): the engine fails closed, as before.

Marking a record revalidated after a reboot (its boot ID, its rewritten spec's stamp,
and when) writes a row of ``stamps``, not the record: re-encoding 10,000 records was
most of a reboot's commit. A stamp names the checksum of the row it was made for
(``base``) and has a checksum of its own over that and its fields; it is folded into the
record when read, while the row still has that checksum, and deleted whenever the row is
written. A stamp that names the row's checksum but fails its own makes that claim's
record untrusted, as a damaged row does. A stamp naming another row (the row was written
since by a release without stamps sharing the database during a rolling update, or the
stamp's ``base`` was damaged) applies to nothing and is ignored: the row is the truth,
and its claim is revalidated again. A release without stamps ignores the
table and revalidates the claims again, so the table needs no new ``meta.schema``.

Today's ``checkpoint.json`` (schema v1 or v2) is read once and its records moved into
the database in one transaction; the old file is then renamed ``*.migrated``.

The API here is synchronous: the engine calls it from its writer thread
(``dralet.node.claims.store``), never from the event loop for a write.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dralet import errors, failpoints, fsutil, gcpause
from dralet.checkpoint import codec, storefiles
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, evolve
from dralet.checkpoint.store import CheckpointStore

__all__ = [
    "SCHEMA_VERSION",
    "Drop",
    "Intent",
    "Op",
    "Put",
    "RecordDatabase",
    "Snapshot",
    "Stamp",
    "read_only_snapshot",
]

SCHEMA_VERSION = 1
"""Version of the table layout (``meta.schema``); a newer one is refused, never guessed."""

FP_COMMIT_BEFORE = "store.commit.before"
FP_COMMIT_AFTER = "store.commit.after"
failpoints.declare(FP_COMMIT_BEFORE, FP_COMMIT_AFTER)
FP_CHECKPOINT_BEFORE = "store.checkpoint.before"
"""Commits are durable in the write-ahead log, not yet copied into the database file."""
FP_CHECKPOINT_AFTER = "store.checkpoint.after"
CHECKPOINT_FAILPOINTS = (FP_CHECKPOINT_BEFORE, FP_CHECKPOINT_AFTER)
"""Not declared with the others: a process reaches them about once (at the end of its
recovery), so a campaign that fires a failpoint at its 2nd or 3rd hit could miss them;
the crash suite arms them at their first hit in runs of their own."""

CHECKPOINT_EVERY = 256
"""Commits between two copies of the log into the database file (``checkpoint``; about
SQLite's own 1,000 pages). SQLite's automatic copy runs inside a commit; doing it here
puts it between failpoints, where the crash campaign kills."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # ``state`` repeats the record's state for counting without decoding; ``data`` and
    # ``checksum`` are the truth.
    "CREATE TABLE IF NOT EXISTS claims "
    "(uid TEXT PRIMARY KEY, state TEXT NOT NULL, data TEXT NOT NULL, checksum TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS holds (pool TEXT NOT NULL, device TEXT NOT NULL, "
    "share_id TEXT NOT NULL, uid TEXT NOT NULL, PRIMARY KEY (pool, device, share_id))",
    "CREATE INDEX IF NOT EXISTS holds_by_uid ON holds (uid)",
    "CREATE TABLE IF NOT EXISTS stamps (uid TEXT PRIMARY KEY, base TEXT NOT NULL, "
    "boot_id TEXT NOT NULL, spec TEXT NOT NULL, updated_at TEXT NOT NULL, "
    "checksum TEXT NOT NULL)",
    # Stamps whose row is gone or changed (see above) apply to nothing any more.
    "DELETE FROM stamps WHERE NOT EXISTS "
    "(SELECT 1 FROM claims WHERE claims.uid = stamps.uid AND claims.checksum = stamps.base)",
)
_ROWS = (
    "SELECT c.uid, c.data, c.checksum, s.base, s.boot_id, s.spec, s.updated_at, s.checksum "
    "FROM claims c LEFT JOIN stamps s ON s.uid = c.uid"
)
_ROWS_WITHOUT_STAMPS = "SELECT uid, data, checksum, NULL, NULL, NULL, NULL, NULL FROM claims c"
"""A read-only view of a database no release with stamps has opened yet."""
_BUSY_TIMEOUT_MS = 30_000
_COMPANIONS = ("-wal", "-shm")
_SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)
"""What a SQLite call raises on a damaged file (the second: its error message quotes
damaged text)."""
_NOT_UTF8 = "Could not decode to UTF-8"
"""The start of the ``sqlite3`` module's error for text that is not UTF-8."""
_TEXT_ERRORS = "surrogateescape"
"""How text that is not UTF-8 is read: every byte kept as a lone surrogate, which no row
checksum can be computed over, so the row fails its own claim alone (``decode_row``)."""
_READ_CHUNK = 500
"""Claims read in one query (SQLite allows 32,766 parameters; small chunks keep each
statement cheap to prepare)."""
MEMO_RECORDS = 1024
"""Records this process wrote or decoded last, kept to be handed back by a read whose row
still hashes to what they were encoded as: a claim's next step reads back what its last
step wrote without decoding it (the row is still read and checked every time). Enough
for the claims of a 1,000-claim call; more would only keep claims at rest in memory
(about 1.7 KB each), whose next step comes long after."""


def _uid_chunks(uids: Sequence[str]) -> Iterator[tuple[Sequence[str], str]]:
    """``uids`` a ``_READ_CHUNK`` at a time, each with the placeholders of its
    ``IN (...)`` list."""
    for start in range(0, len(uids), _READ_CHUNK):
        chunk = uids[start : start + _READ_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


def row_checksum(uid: str, data: str) -> str:
    """What a claim row's ``checksum`` must be: binds the record to its key."""
    return "sha256:" + hashlib.sha256(f"{uid}\n{data}".encode()).hexdigest()


def encode_row(record: ClaimRecord) -> tuple[str, str]:
    data = codec.encode_record(record)
    return data, row_checksum(record.uid, data)


def decode_row(uid: str, data: object, checksum: object) -> ClaimRecord:
    """The record of one row; ``codec.CodecError`` for anything that is not one."""
    if not isinstance(data, str) or not isinstance(checksum, str):
        raise codec.CodecError("row is not text")
    try:
        expected = row_checksum(uid, data)
    except UnicodeEncodeError as exc:
        raise codec.CodecError(f"row holds a lone surrogate at index {exc.start}") from exc
    if checksum != expected:
        raise codec.CodecError("checksum mismatch: the record was changed or damaged")
    return codec.decode_record(uid, data)


def stamp_checksum(uid: str, base: str, boot_id: str, spec: str, updated_at: str) -> str:
    """What a stamp's ``checksum`` must be: binds it to its claim and to the row (by that
    row's checksum, ``base``) it was made for."""
    text = f"{uid}\n{base}\n{boot_id}\n{spec}\n{updated_at}"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _spec_text(stamp: tuple[int, int, int] | None) -> str:
    return "" if stamp is None else ",".join(map(str, stamp))


def _stamp_changes(uid: str, row: Sequence[object]) -> dict[str, object] | None:
    """What the row's stamp changes in its record; None when no stamp applies to the row
    (none, or one made for an earlier row). ``codec.CodecError`` for a damaged stamp."""
    checksum, base, boot_id, spec, updated_at, sealed = row[2:8]
    if base is None or base != checksum:
        return None
    if not (isinstance(boot_id, str) and isinstance(spec, str) and isinstance(updated_at, str)):
        raise codec.CodecError("stamp is not text")
    try:
        expected = stamp_checksum(uid, str(base), boot_id, spec, updated_at)
    except UnicodeEncodeError as exc:
        raise codec.CodecError(f"stamp holds a lone surrogate at index {exc.start}") from exc
    if sealed != expected:
        raise codec.CodecError("stamp checksum mismatch: the stamp was changed or damaged")
    changes: dict[str, object] = {"boot_id": boot_id, "updated_at": updated_at}
    if spec:
        parts = spec.split(",")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise codec.CodecError(f"stamp holds no spec stamp: {spec[:40]!r}")
        changes["cdi_spec_stamp"] = (int(parts[0]), int(parts[1]), int(parts[2]))
    return changes


def _identity(row: Sequence[object]) -> object:
    """What a row's record was decoded from, as ``Snapshot.checksums`` keeps it: the
    row's checksum, or its stamp's (which names the row's) when one applies."""
    return row[7] if row[3] is not None and row[3] == row[2] else row[2]


def _unchanged(uid: str, row: Sequence[object], known: str | None) -> bool:
    """Whether a row (and its stamp) still holds what was decoded from a row with
    identity ``known``."""
    data, checksum = row[1], row[2]
    if known is None or _identity(row) != known or not isinstance(data, str):
        return False
    try:
        if row_checksum(uid, data) != checksum:
            return False
        _stamp_changes(uid, row)
    except (UnicodeEncodeError, codec.CodecError):
        return False
    return True


def _decoded(uid: str, row: Sequence[object]) -> tuple[ClaimRecord | None, str]:
    """A row's record (its stamp folded in), or ``(None, why)`` when it cannot be trusted."""
    try:
        record = decode_row(uid, row[1], row[2])
        changes = _stamp_changes(uid, row)
    except codec.CodecError as exc:
        return None, f"record of claim {uid} is unusable: {exc}"
    return (record if changes is None else evolve(record, **changes)), ""


@dataclass(frozen=True)
class Put:
    """Store ``record`` (its holds follow its state)."""

    record: ClaimRecord


@dataclass(frozen=True)
class Intent:
    """Store a new ``PrepareStarted`` record after checking no other claim holds its devices."""

    record: ClaimRecord


@dataclass(frozen=True)
class Drop:
    uid: str


@dataclass(frozen=True)
class Stamp:
    """Mark a claim's record, as it is stored now, revalidated in boot ``boot_id``, its
    spec rewritten with stamp ``spec_stamp`` (None: the record's stays), at ``updated_at``."""

    uid: str
    boot_id: str
    spec_stamp: tuple[int, int, int] | None
    updated_at: str


Op = Put | Intent | Drop | Stamp


@dataclass(frozen=True)
class Snapshot:
    checkpoint: Checkpoint
    corrupt: Mapping[str, str] = field(default_factory=dict)
    """Claim UID → why its row cannot be trusted."""
    checksums: Mapping[str, str] = field(default_factory=dict)
    """Claim UID → the checksum of the row (or of the stamp on it) its record was decoded
    from (``read_many`` reuses the record while the row still holds exactly that)."""


def _holds(record: ClaimRecord) -> Iterator[tuple[str, str, str]]:
    if record.holds_devices:
        for d in record.devices:
            if not d.admin_access:  # admin access observes a device without owning it
                yield d.pool, d.device, d.share_id


class RecordDatabase:
    """One connection per thread to ``path``; writes go through ``apply`` only."""

    def __init__(
        self,
        path: Path,
        *,
        legacy: Path | None = None,
        driver: str = "",
        read_only: bool = False,
    ) -> None:
        self.path = path
        self.legacy = legacy
        self.driver = driver
        self.read_only = read_only
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._opened = read_only
        self._open_lock = threading.Lock()
        self._stamps: bool | None = None
        """Whether the database has the ``stamps`` table (asked once)."""
        self._reserve = False
        """Whether ``storefiles``' reserve is kept (tried again after commits if not)."""
        self._commits = 0
        """Commits since the last ``checkpoint``."""
        self._memo: dict[str, tuple[str, ClaimRecord]] = {}
        """Claim UID → the identity of the row a record was encoded as or decoded from,
        and that record (``MEMO_RECORDS`` of the latest)."""
        self._memo_lock = threading.Lock()

    # ------------------------------------------------------------------ opening

    def _check_entries(self, *, fresh: bool = False) -> None:
        """Refuse anything but our own regular files (SQLite would follow a link, block
        on a FIFO, or open a device), and a file that cannot be the database this node
        kept: SQLite would read an empty one as a new, empty database (``storefiles``).
        ``fresh``: this process has just created the file."""
        for suffix in ("", *_COMPANIONS):
            entry = Path(f"{self.path}{suffix}")
            try:
                mode = os.lstat(entry).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                raise errors.CheckpointCorruptError(
                    str(entry), f"is {fsutil.file_kind(mode)}, not a regular file"
                )
        try:
            why = storefiles.damage(self.path, fresh=fresh, read_header=not _live(self.path))
        except OSError as exc:
            raise errors.CheckpointCorruptError(str(self.path), f"cannot be read: {exc}") from exc
        if why:
            raise errors.CheckpointCorruptError(str(self.path), why)

    def open(self) -> None:
        """Create the database now if it does not exist yet (and take over a
        ``checkpoint.json``); reads never create it."""
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._open_lock:
            if not self._opened:
                self._open()
                self._opened = True
        conn = self._raw_connect()
        self._local.conn = conn
        with self._open_lock:
            self._connections.append(conn)
        _opened(self.path, 1)
        return conn

    def _raw_connect(self, *, fresh: bool = False) -> sqlite3.Connection:
        self._check_entries(fresh=fresh)
        try:
            # Each connection is used by the one thread that made it; ``close`` may come
            # from another once that thread is done with it.
            conn = sqlite3.connect(
                f"file:{self.path}?mode={'ro' if self.read_only else 'rw'}",
                uri=True,
                isolation_level=None,
                timeout=30.0,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            # FULL in WAL mode: every commit fsyncs the log, so a commit is durable.
            conn.execute("PRAGMA synchronous = FULL")
            if not self.read_only:
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # ``checkpoint`` does it
        except _SQLITE_ERRORS as exc:
            raise self._failure(exc) from exc
        return conn

    def _failure(self, exc: sqlite3.DatabaseError | UnicodeDecodeError) -> Exception:
        """An ``OSError`` for what a disk does (full, read-only, I/O, busy): retried later;
        ``CheckpointCorruptError`` for a file SQLite cannot read as a database."""
        if isinstance(exc, UnicodeDecodeError):
            # SQLite's own message quotes damaged schema text that is not UTF-8.
            return errors.CheckpointCorruptError(
                str(self.path), "its schema is damaged (SQLite's report is not even text)"
            )
        if isinstance(exc, sqlite3.OperationalError):
            return _as_os_error(exc, self.path)
        return errors.CheckpointCorruptError(str(self.path), str(exc))

    def _open(self) -> None:
        """Create the file (0600, never through a link) and its tables; migrate once."""
        self._check_entries()
        fsutil.ensure_private_dir(self.path.parent)
        created = False
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            created = True
        try:
            self._initialize(created=created)
        except BaseException:
            if created and os.path.getsize(self.path) == 0:
                # Nothing was written: leave no empty file a later start must doubt.
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            raise
        storefiles.write_marker(self.path, driver=self.driver)
        self._reserve = storefiles.ensure_reserve(self.path)
        if created:
            fsutil.fsync_dir(self.path.parent)

    def _initialize(self, *, created: bool) -> None:
        """The tables (on a new file), the schema check, the one migration."""
        conn = self._raw_connect(fresh=created)
        _opened(self.path, 1)
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise errors.CheckpointCorruptError(str(self.path), f"cannot use WAL ({mode})")
            with _transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                found = _fetch(conn, "SELECT value FROM meta WHERE key = 'schema'")
                stored = found[0] if found else None
                if stored is None:
                    conn.execute(
                        "INSERT INTO meta VALUES ('schema', ?), ('driver', ?), ('boot_id', '')",
                        (str(SCHEMA_VERSION), self.driver),
                    )
                elif not str(stored[0]).isdigit() or int(str(stored[0])) > SCHEMA_VERSION:
                    raise errors.CheckpointCorruptError(
                        str(self.path),
                        f"written by a newer dralet (store schema {str(stored[0])[:16]}, "
                        f"this release reads up to {SCHEMA_VERSION}); refusing to guess",
                    )
                self._migrate(conn)
            self._retire_legacy()
        except _SQLITE_ERRORS as exc:
            raise self._failure(exc) from exc
        finally:
            conn.close()
            _opened(self.path, -1)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Move the records of ``checkpoint.json`` in, once (raises if it is corrupt)."""
        if self.legacy is None:
            return
        if _fetch(conn, "SELECT 1 FROM meta WHERE key = 'migrated'"):
            return
        old = CheckpointStore(self.legacy).load()  # raises CheckpointCorruptError
        records = list(old.claims.values())
        self._free(conn, [Put(r) for r in records if not r.holds_devices])
        self._store(conn, [r for r in records if r.holds_devices])
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('boot_id', ?), ('migrated', ?)",
            (old.boot_id, str(len(old.claims))),
        )

    def _retire_legacy(self) -> None:
        if self.legacy is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.legacy, self.legacy.with_name(self.legacy.name + ".migrated"))
            fsutil.fsync_dir(self.legacy.parent)

    # ------------------------------------------------------------------ reading

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
        conn = self._connect()
        try:
            return _fetch(conn, sql, args)
        except _SQLITE_ERRORS as exc:
            raise self._failure(exc) from exc

    def _rows(self) -> str:
        """The query for claim rows with their stamps (aliases ``c`` and ``s``)."""
        if self._stamps is None:
            # Opening for writing creates the table; a read-only reader may come first.
            self._stamps = not self.read_only or bool(
                self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stamps'")
            )
        return _ROWS if self._stamps else _ROWS_WITHOUT_STAMPS

    def _absent(self) -> Snapshot | None:
        """What a read finds before the database exists (nothing is created by reading):
        the records of a ``checkpoint.json`` not taken over yet, or none. A database
        this node had and lost is ``CheckpointCorruptError``."""
        if self._opened or os.path.lexists(self.path):
            return None
        # Another thread may create the file meanwhile (``_open``), empty until SQLite
        # first writes to it: a file that stands there by now is read as the store it is
        # (judged when opened), never judged here as the store found missing.
        why = storefiles.damage(self.path, read_header=not _live(self.path))
        if os.path.lexists(self.path):
            return None
        if why:
            raise errors.CheckpointCorruptError(str(self.path), why)
        return Snapshot(CheckpointStore(self.legacy).load() if self.legacy else Checkpoint())

    def read(self, uid: str) -> tuple[ClaimRecord | None, str]:
        """One claim's record, or ``(None, why)`` when its row is corrupt."""
        return self.read_many([uid])[uid]

    def read_many(
        self, uids: Sequence[str], *, known: Snapshot | None = None
    ) -> dict[str, tuple[ClaimRecord | None, str]]:
        """``read`` of several claims in one query per ``_READ_CHUNK`` of them.

        With ``known`` (a snapshot taken earlier), a row whose data still hashes to the
        checksum that snapshot decoded its record from gives that record back without
        decoding it again: the same checksum over the same key is the same data.
        """
        absent = self._absent()
        if absent is not None:
            return {uid: (absent.checkpoint.claims.get(uid), "") for uid in uids}
        found: dict[str, tuple[ClaimRecord | None, str]] = dict.fromkeys(uids, (None, ""))
        unique = list(found)
        checksums = known.checksums if known is not None else {}
        records = known.checkpoint.claims if known is not None else {}
        decoded_now: list[tuple[str, str, ClaimRecord]] = []
        with gcpause.paused():
            for chunk, marks in _uid_chunks(unique):
                for row in self._query(f"{self._rows()} WHERE c.uid IN ({marks})", chunk):
                    key = str(row[0])
                    identity, record = checksums.get(key), records.get(key)
                    if record is None:
                        identity, record = self._memo.get(key, (None, None))
                    if record is not None and _unchanged(key, row, identity):
                        found[key] = (record, "")
                        continue
                    found[key] = decoded = _decoded(key, row)
                    if decoded[0] is not None:
                        decoded_now.append((key, str(_identity(row)), decoded[0]))
        self._remember(decoded_now)
        return found

    def _remember(self, rows: Iterable[tuple[str, str, ClaimRecord]]) -> None:
        with self._memo_lock:
            for uid, identity, record in rows:
                self._memo.pop(uid, None)  # the latest go last, the oldest first
                self._memo[uid] = (identity, record)
            while len(self._memo) > MEMO_RECORDS:
                del self._memo[next(iter(self._memo))]

    def _forget(self, uids: Iterable[str]) -> None:
        with self._memo_lock:
            for uid in uids:
                self._memo.pop(uid, None)

    def snapshot(self) -> Snapshot:
        absent = self._absent()
        if absent is not None:
            return absent
        records: dict[str, ClaimRecord] = {}
        corrupt: dict[str, str] = {}
        checksums: dict[str, str] = {}
        with gcpause.paused():
            for row in self._query(self._rows()):
                uid = str(row[0])
                record, why = _decoded(uid, row)
                if record is None:
                    corrupt[uid] = why
                else:
                    records[uid] = record
                    checksums[uid] = str(_identity(row))
        meta = {str(k): str(v) for k, v in self._query("SELECT key, value FROM meta")}
        checkpoint = Checkpoint(
            driver=str(meta.get("driver", "")), boot_id=str(meta.get("boot_id", "")), claims=records
        )
        return Snapshot(checkpoint, corrupt, checksums)

    def count(self, state: str) -> int:
        absent = self._absent()
        if absent is not None:
            return sum(1 for r in absent.checkpoint.claims.values() if r.state.value == state)
        return int(str(self._query("SELECT count(*) FROM claims WHERE state = ?", (state,))[0][0]))

    def migrated(self) -> bool:
        """Whether the records of ``checkpoint.json`` (if any) are in the database."""
        try:
            return bool(self._query("SELECT 1 FROM meta WHERE key = 'migrated'"))
        except errors.CheckpointCorruptError:
            return False

    # ------------------------------------------------------------------ writing

    def apply(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """Apply ``ops`` in ONE transaction (one fsync); a result per op.

        An op that cannot be applied (an intent on a device already held) gets
        its error and changes nothing, without holding back the others. A failure of the
        transaction itself (disk full, I/O error) is raised for all of them.

        Ops are applied by kind, each kind with one statement for all of its rows:
        first every record that lets its devices go (dropped, or released), then every
        record that keeps holding them, then the intents, checked against the holds
        left after both. The engine sends a claim's ops one at a time, so a batch never
        holds two of one claim; a device in the batch is released in hardware before its
        release is recorded, so an intent granted on it here is granted safely.
        """
        try:
            results = self._apply(ops)
        except _DiskFull as full:
            results = self._apply_on_full_disk(ops, full.error)
        self._after_commit()
        return results

    def _apply(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """``apply``, once; ``_DiskFull`` when SQLite found the disk full."""
        results: list[BaseException | None] = [None] * len(ops)
        freeing: list[tuple[int, Drop | Put]] = []
        keeping: list[Put] = []
        checked: list[tuple[int, Intent]] = []
        stamping: list[tuple[int, Stamp]] = []
        for index, op in enumerate(ops):
            if isinstance(op, Intent):
                checked.append((index, op))
            elif isinstance(op, Stamp):
                stamping.append((index, op))
            elif isinstance(op, Drop) or not op.record.holds_devices:
                freeing.append((index, op))
            else:
                keeping.append(op)
        conn = self._connect()
        written: list[tuple[str, str, ClaimRecord]] = []
        # What the commit changes is forgotten first: a failed commit may have
        # changed it all the same (a read then decodes the row, as without a memo).
        self._forget(_uid_of(op) for op in ops)
        try:
            with _transaction(conn):
                written += self._free(conn, [op for _, op in freeing])
                written += self._store(conn, [op.record for op in keeping])
                for (index, _), result in zip(
                    checked, self._grant(conn, [op for _, op in checked], written), strict=True
                ):
                    results[index] = result
                for (index, _), result in zip(
                    stamping, self._stamp(conn, [op for _, op in stamping]), strict=True
                ):
                    results[index] = result
                failpoints.hit(FP_COMMIT_BEFORE)
        except _SQLITE_ERRORS as exc:
            failure = self._failure(exc)
            if isinstance(failure, OSError) and failure.errno == errno.ENOSPC:
                raise _DiskFull(failure) from exc
            raise failure from exc
        self._remember(written)
        failpoints.hit(FP_COMMIT_AFTER)
        return results

    def _apply_on_full_disk(self, ops: Sequence[Op], error: OSError) -> list[BaseException | None]:
        """The disk is full: a claim on its way down (a rollback, an unprepare) must
        still be recorded, or it is stranded half-way. Those ops are tried again, alone,
        once the log starts over in the space it already has and then with the
        reserve given back; the others (new intents, completions, stamps) fail with
        ``ENOSPC``, recording nothing."""
        down = [i for i, op in enumerate(ops) if _frees(op)]
        if not down:
            raise error
        results: list[BaseException | None] = [error] * len(ops)
        for make_room in (self._restart_log, self._give_back_reserve):
            if not make_room():
                continue
            try:
                done = self._apply([ops[i] for i in down])
            except _DiskFull:
                continue
            for index, result in zip(down, done, strict=True):
                results[index] = result
            return results
        raise error

    def _restart_log(self) -> bool:
        """Copy the log into the database so the next commit rewrites it from its
        start, in space it already has; whether that worked."""
        try:
            busy, _, _ = self._connect().execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        except _SQLITE_ERRORS:
            return False
        return not busy

    def _give_back_reserve(self) -> bool:
        self._reserve = False
        return storefiles.release_reserve(self.path)

    def _after_commit(self) -> None:
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY:
            with contextlib.suppress(OSError):  # the log keeps the commits meanwhile
                self.checkpoint()
        if not self._reserve:
            self._reserve = storefiles.ensure_reserve(self.path)

    def checkpoint(self) -> None:
        """Copy the commits in the log into the database file (as far as readers
        allow); the log is reused from its start afterwards."""
        conn = self._connect()
        failpoints.hit(FP_CHECKPOINT_BEFORE)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except _SQLITE_ERRORS as exc:
            raise self._failure(exc) from exc
        self._commits = 0
        failpoints.hit(FP_CHECKPOINT_AFTER)

    @staticmethod
    def _free(
        conn: sqlite3.Connection, ops: Sequence[Drop | Put]
    ) -> list[tuple[str, str, ClaimRecord]]:
        """Drops and records that hold nothing: their rows change, their holds go. The
        rows written: each record's UID, checksum and the record."""
        if not ops:
            return []
        uids = [(op.uid if isinstance(op, Drop) else op.record.uid,) for op in ops]
        conn.executemany("DELETE FROM holds WHERE uid = ?", uids)
        conn.executemany("DELETE FROM stamps WHERE uid = ?", uids)
        conn.executemany(
            "DELETE FROM claims WHERE uid = ?", [(op.uid,) for op in ops if isinstance(op, Drop)]
        )
        puts = [op.record for op in ops if isinstance(op, Put)]
        rows = [_row(record) for record in puts]
        conn.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)", rows)
        return [(row[0], row[3], record) for row, record in zip(rows, puts, strict=True)]

    @staticmethod
    def _store(
        conn: sqlite3.Connection, records: Sequence[ClaimRecord]
    ) -> list[tuple[str, str, ClaimRecord]]:
        """Records that hold their devices: rows and holds (re-stated: a claim's devices
        never change after its intent, and a record stored by hand gets its holds). The
        rows written, as ``_free`` gives them."""
        if not records:
            return []
        conn.executemany("DELETE FROM stamps WHERE uid = ?", [(r.uid,) for r in records])
        rows = [_row(record) for record in records]
        conn.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)", rows)
        conn.executemany(
            "INSERT OR REPLACE INTO holds VALUES (?, ?, ?, ?)",
            [(*key, r.uid) for r in records for key in _holds(r)],
        )
        return [(row[0], row[3], record) for row, record in zip(rows, records, strict=True)]

    def _grant(
        self,
        conn: sqlite3.Connection,
        intents: Sequence[Intent],
        written: list[tuple[str, str, ClaimRecord]],
    ) -> list[BaseException | None]:
        """Intents, in order: each is stored if no other claim holds one of its devices,
        as stored or as granted earlier in this batch; else it is refused. The rows
        stored go to ``written``."""
        granted: dict[tuple[str, str, str], str] = {}
        stored: list[ClaimRecord] = []
        results: list[BaseException | None] = []
        for op in intents:
            record = op.record
            keys = list(_holds(record))
            busy: BaseException | None = None
            for key in keys:
                holder = granted.get(key)
                if holder is None:
                    rows = _fetch(
                        conn,
                        "SELECT uid FROM holds WHERE pool = ? AND device = ? AND share_id = ?",
                        key,
                    )
                    holder = str(rows[0][0]) if rows else None
                if holder is not None and holder != record.uid:
                    busy = errors.DeviceBusyError(
                        record.uid, device=f"{key[0]}/{key[1]}", holder_uid=holder
                    )
                    break
            results.append(busy)
            if busy is None:
                granted.update((key, record.uid) for key in keys)
                stored.append(record)
        written += self._store(conn, stored)
        return results

    @staticmethod
    def _stamp(conn: sqlite3.Connection, stamps: Sequence[Stamp]) -> list[BaseException | None]:
        """Stamps, each on its claim's row as stored now; a claim without a row gets an
        error and no stamp."""
        if not stamps:
            return []
        bases: dict[str, str] = {}
        for chunk, marks in _uid_chunks([op.uid for op in stamps]):
            sql = f"SELECT uid, checksum FROM claims WHERE uid IN ({marks})"  # noqa: S608 - only placeholders
            bases.update((str(uid), str(checksum)) for uid, checksum in _fetch(conn, sql, chunk))
        rows: list[tuple[str, str, str, str, str, str]] = []
        results: list[BaseException | None] = []
        for op in stamps:
            base = bases.get(op.uid)
            if base is None:
                results.append(LookupError(f"claim {op.uid} has no record to stamp"))
                continue
            spec = _spec_text(op.spec_stamp)
            sealed = stamp_checksum(op.uid, base, op.boot_id, spec, op.updated_at)
            rows.append((op.uid, base, op.boot_id, spec, op.updated_at, sealed))
            results.append(None)
        conn.executemany("INSERT OR REPLACE INTO stamps VALUES (?, ?, ?, ?, ?, ?)", rows)
        return results

    # ------------------------------------------------------------------ unusable store

    def close(self) -> None:
        """Close every connection (once no thread uses them any more)."""
        with self._open_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        _opened(self.path, -len(connections))
        self._local = threading.local()

    def files(self) -> Iterable[Path]:
        """The store's files as they are on disk now (its marker included)."""
        return [
            *(Path(f"{self.path}{s}") for s in ("", *_COMPANIONS)),
            storefiles.marker_path(self.path),
        ]


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction, taking the database's write lock at once; committed when the
    block ends, rolled back if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")  # a COMMIT that failed may leave it open
        raise


_LIVE_CONNECTIONS: collections.Counter[str] = collections.Counter()
"""SQLite connections this process has open, per database path: while there are any, no
other descriptor of the file may be opened and closed here (``storefiles.damage``)."""
_LIVE_LOCK = threading.Lock()


def _opened(path: Path, change: int) -> None:
    with _LIVE_LOCK:
        _LIVE_CONNECTIONS[os.path.abspath(path)] += change


def _live(path: Path) -> bool:
    with _LIVE_LOCK:
        return _LIVE_CONNECTIONS[os.path.abspath(path)] > 0


class _DiskFull(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _frees(op: Op) -> bool:
    """Whether ``op`` takes a claim down (so must be recorded even on a full disk)."""
    if isinstance(op, Drop):
        return True
    return isinstance(op, Put) and op.record.state in _GOING_DOWN


_GOING_DOWN = frozenset({ClaimState.UNPREPARE_STARTED, ClaimState.RELEASED})


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", _TEXT_ERRORS)


def _fetch(
    conn: sqlite3.Connection, sql: str, args: Sequence[object] = ()
) -> list[tuple[object, ...]]:
    """Every row of a query. Text that is not UTF-8 makes SQLite's module fail the whole
    query; it is then read again with such text kept as lone surrogates (four times
    slower, so only then), which fails the claim whose row holds it, not the store."""
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if _NOT_UTF8 not in str(exc):
            raise
    conn.text_factory = _text
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.text_factory = str


def _uid_of(op: Op) -> str:
    return op.record.uid if isinstance(op, Put | Intent) else op.uid


def _row(record: ClaimRecord) -> tuple[str, str, str, str]:
    data, checksum = encode_row(record)
    return record.uid, record.state.value, data, checksum


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _disk_full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


def _as_os_error(exc: sqlite3.OperationalError, path: Path) -> OSError:
    """The errno behind SQLite's result code; a full disk reads as ``ENOSPC`` also where
    SQLite reports it as an I/O error (it cannot grow its shared-memory file)."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    text = str(exc)
    if "FULL" in name or "full" in text or _disk_full(path):
        code = errno.ENOSPC
    elif "READONLY" in name or "readonly" in text:
        code = errno.EROFS
    elif "BUSY" in name or "LOCKED" in name or _is_busy(exc):
        code = errno.EBUSY
    elif "PERM" in name or "AUTH" in name:
        code = errno.EACCES
    else:
        code = errno.EIO
    return OSError(code, f"{os.strerror(code)} ({text})", str(path))


def read_only_snapshot(path: Path, legacy: Path | None = None) -> Snapshot:
    """The records as stored, writing nothing (``dralet audit``): the database, or the
    ``checkpoint.json`` it has not taken over yet (raises ``CheckpointCorruptError``)."""

    def from_legacy() -> Snapshot:
        return Snapshot(CheckpointStore(legacy).load() if legacy else Checkpoint())

    if not os.path.lexists(path):
        why = storefiles.damage(path)
        if why:
            raise errors.CheckpointCorruptError(str(path), why)
        return from_legacy()
    db = RecordDatabase(path, read_only=True)
    try:
        if legacy is not None and os.path.lexists(legacy) and not db.migrated():
            return from_legacy()
        return db.snapshot()
    finally:
        db.close()
