"""The claim database's files as files, judged before SQLite reads them.

SQLite reads a zero-byte file as a new, empty database, and a missing one is simply
created: either would make a node that had prepared claims forget them. So whether the
node ever had a store is kept outside the database file: ``<db>.created``, written
durably once the database's tables first exist (and by any release that opens a
database without one), never removed except when the store is reset. Whatever is at the
database's path is then judged here: a database this node kept (or none, on a node that
never had one), or damage, said in one sentence (``damage``).

``<db>.reserve`` is space the store keeps for itself: a file of ``RESERVE_BYTES``
written when the store is opened, given back when a write that frees claims finds the
disk full, so rolling back still gets recorded (``database.RecordDatabase.apply``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

from dralet import fsutil

__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "RESERVE_BYTES",
    "damage",
    "ensure_reserve",
    "marker_path",
    "release_reserve",
    "reserve_path",
    "write_marker",
]

MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
HEADER_BYTES = 100
"""Size of the database header (sqlite.org/fileformat2.html, "The Database Header")."""
_PAGE_SIZE = slice(16, 18)
_CHANGE_COUNTER = slice(24, 28)
_PAGE_COUNT = slice(28, 32)
_VALID_FOR = slice(92, 96)
_MIN_PAGE = 512
_MAX_PAGE = 65536
_MAX_PAGE_CODE = 1
"""A page size of 65,536 is stored as 1 (it does not fit the 16-bit field)."""
RESERVE_BYTES = 64 * 1024
"""Space kept for recording rollbacks on a full disk (a rollback of a whole group of
claims is a few pages of the log)."""
MARKER_SUFFIX = ".created"
RESERVE_SUFFIX = ".reserve"
_LOG_SUFFIX = "-wal"
_WAL_HEADER_BYTES = 32


def marker_path(db: Path) -> Path:
    return db.with_name(db.name + MARKER_SUFFIX)


def reserve_path(db: Path) -> Path:
    return db.with_name(db.name + RESERVE_SUFFIX)


def write_marker(db: Path, *, driver: str) -> None:
    """Record, durably and outside the database, that this node has a claim store."""
    if os.path.lexists(marker_path(db)):
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = f"claim store {db.name} of driver {driver or '?'} created {stamp}\n"
    fsutil.atomic_write(marker_path(db), text.encode())


def damage(db: Path, *, fresh: bool = False, read_header: bool = True) -> str:
    """Why what is at ``db`` cannot be the store this node kept; '' when it can be (or
    when there is none and the node never had one). ``fresh``: this process created the
    file just now, so an empty one is expected. ``read_header=False`` where this process
    has SQLite connections to ``db`` open: closing any other descriptor of the file
    would drop their POSIX locks (sqlite.org/howtocorrupt.html, 2.2), so the header is
    then left to SQLite, which is reading it anyway."""
    try:
        info = os.lstat(db)
    except FileNotFoundError:
        return _missing(db)
    if not stat.S_ISREG(info.st_mode):
        return f"is {fsutil.file_kind(info.st_mode)}, not a regular file"
    if info.st_size == 0:
        # In WAL mode a new database's pages stay in its log until the first checkpoint,
        # so an empty file is a store in use where this process has it open or its log
        # holds frames (a WAL header is 32 bytes; sqlite.org/fileformat2.html, 4.1).
        if fresh or not read_header or _log_size(db) > _WAL_HEADER_BYTES:
            return ""
        return "is empty (0 bytes): its records were lost"
    if not read_header:
        return ""
    header = _header(db)
    start = header[: len(MAGIC)]
    if start != MAGIC[: len(start)]:
        return f"is not a database (it starts with {start!r})"
    if len(header) < HEADER_BYTES:
        return f"is truncated: {info.st_size} bytes, shorter than a database header"
    page = int.from_bytes(header[_PAGE_SIZE], "big")
    page = _MAX_PAGE if page == _MAX_PAGE_CODE else page
    if page < _MIN_PAGE or page > _MAX_PAGE or page & (page - 1):
        return f"has a damaged header (page size {page})"
    if info.st_size % page:
        return f"is truncated: {info.st_size} bytes is not a whole number of {page}-byte pages"
    pages = int.from_bytes(header[_PAGE_COUNT], "big")
    if header[_VALID_FOR] == header[_CHANGE_COUNTER] and info.st_size < pages * page:
        return f"is truncated: {info.st_size} bytes, its header counts {pages} pages of {page}"
    return ""


def _log_size(db: Path) -> int:
    try:
        return os.lstat(f"{db}{_LOG_SUFFIX}").st_size
    except FileNotFoundError:
        return 0


def _missing(db: Path) -> str:
    log = Path(f"{db}{_LOG_SUFFIX}")
    if os.path.lexists(log):
        return f"is missing, but its write-ahead log {log.name} is there: the database was lost"
    marker = marker_path(db)
    if os.path.lexists(marker):
        return f"is missing, but this node had a claim store ({marker.name} is there)"
    return ""


def _header(db: Path) -> bytes:
    """The first ``HEADER_BYTES`` of a regular file, never through a link or blocking."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(db, flags)
    try:
        return os.pread(fd, HEADER_BYTES, 0)
    finally:
        os.close(fd)


def ensure_reserve(db: Path) -> bool:
    """Keep ``RESERVE_BYTES`` of the disk for the store; whether the reserve is there
    (False on a disk too full to keep it, which is tried again later)."""
    path = reserve_path(db)
    with contextlib.suppress(FileNotFoundError):
        if os.lstat(path).st_size >= RESERVE_BYTES:
            return True
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # best effort: a disk too full (or failing) keeps none for now
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    return True


def release_reserve(db: Path) -> bool:
    """Give the reserve back to the disk; whether there was one."""
    try:
        os.unlink(reserve_path(db))
    except FileNotFoundError:
        return False
    return True
