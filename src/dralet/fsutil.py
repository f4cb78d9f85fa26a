"""Crash-safe file primitives: atomic write, safe read, idempotent remove, temp sweep, locks.

The one recipe for durable state: write the new bytes into a temp file in the target's
directory, fsync it, put it in place under the target's name, fsync the directory. A
reader sees the old bytes or the new bytes, never a mix, and after a crash the new name
is either durable or absent. Every step works relative to one open directory
descriptor, so swapping a directory for a symlink half-way redirects nothing.

The temp file has no name at all where the filesystem allows it (``O_TMPFILE``, open(2)):
it is linked in under the target's name once written and synced, which fails rather than
replace anything already there, and a crash before that leaves nothing behind. A target
that exists, and a filesystem without ``O_TMPFILE``, take the named route: a temp file
under an unpredictable name (``O_CREAT|O_EXCL|O_NOFOLLOW`` when created: nothing planted
there is ever followed or truncated) renamed over the target.

A writer holds an ``flock`` on a named temp file until the rename; ``sweep_temp_files``
removes only temp files nobody holds, so a sweep beside a running writer (two driver
instances during a rolling update) never pulls a file from under it. Used by
``dralet.cdi``, ``dralet.checkpoint`` and backends (``dralet.atomic_write``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NamedTuple

from dralet import failpoints

__all__ = [
    "Directory",
    "FileLock",
    "KeyedLocks",
    "UnsafeFileError",
    "atomic_write",
    "ensure_private_dir",
    "file_kind",
    "fsync_dir",
    "is_temp_name",
    "list_temp_files",
    "read_file",
    "remove_file",
    "sweep_temp_files",
]

TEMP_SUFFIX = ".tmp"
# ``.<target name>.<16 hex digits>.tmp``; releases before 0.2 used the writer's PID.
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?:[0-9a-f]{16}|[0-9]+)\.tmp")
_TEMP_ATTEMPTS = 16
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_UNNAMED_FLAGS = os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC  # no O_EXCL: it may be linked
# open(2): a filesystem without O_TMPFILE says EOPNOTSUPP; a kernel before 3.11 reads the
# flag as O_DIRECTORY (EISDIR).
_NO_UNNAMED = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)
# linkat(2) links an O_TMPFILE descriptor by this path (AT_SYMLINK_FOLLOW) without the
# CAP_DAC_READ_SEARCH that AT_EMPTY_PATH needs on older kernels.
_FD_PATH = "/proc/self/fd/{}"


class UnsafeFileError(OSError):
    """Something that is not a regular file of ours sits where one is read or written."""

    def __init__(self, path: Path | str, problem: str, *, code: int = errno.EPERM) -> None:
        super().__init__(code, f"{path} {problem}")
        self.path = str(path)
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path} {self.problem}"


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a directory`` ... for messages about the file type in ``mode``."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


class _Points(NamedTuple):
    before_fsync: str
    after_fsync: str
    after_rename: str
    after_dir_fsync: str


_points_of: dict[str, _Points] = {}


def _points(tag: str) -> _Points:
    """The failpoints of a write tagged ``tag`` (declared the first time it is asked for:
    a batch of 10,000 spec writes does not build their names 10,000 times)."""
    points = _points_of.get(tag)
    if points is None:
        points = _Points(
            f"{tag}.before-fsync",
            f"{tag}.after-fsync",
            f"{tag}.after-rename",
            f"{tag}.after-dir-fsync",
        )
        failpoints.declare(*points)
        _points_of[tag] = points
    return points


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink inside ``directory`` durable."""
    fd = os.open(directory, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temp_name(name: str, *, target_prefix: str = "") -> bool:
    """Whether ``name`` is a temp file ``atomic_write`` makes for a target starting so."""
    match = _TEMP_NAME.fullmatch(name)
    return match is not None and match["target"].startswith(target_prefix)


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _temp_name(name: str) -> str:
    return f".{name}.{secrets.token_hex(8)}{TEMP_SUFFIX}"


def _create_temp(dir_fd: int, directory: Path, name: str, mode: int) -> tuple[int, str]:
    """A new, locked, empty temp file for ``name``; nothing that already exists is opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(_TEMP_ATTEMPTS):
        tmp = _temp_name(name)
        try:
            fd = os.open(tmp, flags, mode, dir_fd=dir_fd)  # the umask may take bits away
        except FileExistsError:
            continue  # planted, or a one-in-2**64 collision: take another name
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A sweep may have locked and unlinked it between our create and our flock.
            if os.fstat(fd).st_nlink == 0:
                raise BlockingIOError(errno.EWOULDBLOCK, "temp file swept")
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        return fd, tmp
    raise _no_temp_name(directory, name)


def _no_temp_name(directory: Path, name: str) -> UnsafeFileError:
    return UnsafeFileError(
        directory / f".{name}.*{TEMP_SUFFIX}",
        f"could not be created under {_TEMP_ATTEMPTS} fresh names",
        code=errno.EEXIST,
    )


def _fill(fd: int, data: bytes, mode: int, points: _Points | None) -> os.stat_result:
    """Write ``data`` to the new file ``fd`` and sync it, with exactly ``mode``; its status."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    if points:
        failpoints.hit(points.before_fsync)
    os.fsync(fd)
    if points:
        failpoints.hit(points.after_fsync)
    info = os.fstat(fd)
    if stat.S_IMODE(info.st_mode) != mode:  # the umask took bits away
        os.fchmod(fd, mode)
        os.fsync(fd)
        info = os.fstat(fd)
    return info


class Directory:
    """One open directory whose files are replaced and removed by name, each step
    relative to its descriptor: a batch of writes opens the directory once, then makes
    all of them durable with one ``fsync``. Close it (or use ``with``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, _DIR_FLAGS)
        self._unnamed = True
        """Whether temp files may be unnamed (cleared the first time that fails here)."""

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        os.close(self.fd)

    def fsync(self) -> None:
        """Make the renames and unlinks done in it so far durable."""
        os.fsync(self.fd)

    def replace(
        self, name: str, data: bytes, *, mode: int = 0o600, failpoint: str = ""
    ) -> os.stat_result:
        """Replace the file ``name`` with ``data`` atomically (durable once the directory
        is fsynced); the status of the file put in place, taken from the descriptor
        that wrote it. The rules are ``atomic_write``'s."""
        points = _points(failpoint) if failpoint else None
        info = self._replace_unnamed(name, data, mode, points) if self._unnamed else None
        if info is None:
            info = self._replace_named(name, data, mode, points)
        if points:
            failpoints.hit(points.after_rename)
        return info

    def _replace_unnamed(
        self, name: str, data: bytes, mode: int, points: _Points | None
    ) -> os.stat_result | None:
        """``replace`` through an ``O_TMPFILE`` file; None when this directory has none."""
        try:
            fd = os.open(".", _UNNAMED_FLAGS, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno not in _NO_UNNAMED:
                raise
            self._unnamed = False
            return None
        try:
            info = _fill(fd, data, mode, points)
            source = _FD_PATH.format(fd)
            try:
                os.link(source, name, dst_dir_fd=self.fd, follow_symlinks=True)
            except FileExistsError:
                self._rename_over(fd, source, name)
            except FileNotFoundError:
                if os.path.exists(source):
                    raise
                self._unnamed = False  # no /proc here to link it by
                return None
            return info
        finally:
            os.close(fd)

    def _rename_over(self, fd: int, source: str, name: str) -> None:
        """Put the written, unnamed file ``fd`` in place of the existing ``name``: linked
        under a temp name (held, so no sweep takes it), then renamed over it."""
        self._check_replaceable(name)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for _ in range(_TEMP_ATTEMPTS):
            tmp = _temp_name(name)
            try:
                os.link(source, tmp, dst_dir_fd=self.fd, follow_symlinks=True)
                break
            except FileExistsError:
                continue
        else:
            raise _no_temp_name(self.path, name)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
            raise

    def _check_replaceable(self, name: str) -> None:
        existing = _lstat_at(self.fd, name)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise UnsafeFileError(
                self.path / name,
                f"is {file_kind(existing.st_mode)}, not a regular file; not replacing it",
            )

    def _replace_named(
        self, name: str, data: bytes, mode: int, points: _Points | None
    ) -> os.stat_result:
        self._check_replaceable(name)
        fd, tmp = _create_temp(self.fd, self.path, name, mode)
        try:
            try:
                info = _fill(fd, data, mode, points)
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            finally:
                os.close(fd)  # releases the flock: after the rename, or on error
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        return info

    def remove(self, name: str, *, failpoint: str = "") -> bool:
        """Unlink the file ``name`` (durable once the directory is fsynced); whether it
        existed. The rules are ``remove_file``'s."""
        if failpoint:
            failpoints.declare(f"{failpoint}.before-unlink", f"{failpoint}.after-unlink")
            failpoints.hit(f"{failpoint}.before-unlink")
        try:
            os.unlink(name, dir_fd=self.fd)
        except (FileNotFoundError, IsADirectoryError):
            return False
        if failpoint:
            failpoints.hit(f"{failpoint}.after-unlink")
        return True


def atomic_write(
    path: Path, data: bytes, *, mode: int = 0o600, failpoint: str = "", sync_dir: bool = True
) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    ``sync_dir=False`` leaves the directory's fsync (which makes the new name durable)
    to the caller, who may then make several durable with one ``fsync_dir`` (or write
    them all through one ``Directory``).

    The temp file has no name until it is whole, or (the named route) starts with a dot
    and ends in ``.tmp``: CDI runtimes load only ``.json``/``.yaml`` files and the
    kubelet ignores dot files, so a half-written temp file is never picked up. Anything
    but a regular file at ``path`` (a symlink, FIFO, socket, device or directory) is
    never replaced: ``UnsafeFileError`` names it. A regular file there is replaced by a
    rename, never written through, so a hard link to it elsewhere keeps its content. On
    any error the temp file is gone and ``path`` keeps its previous content.
    """
    with Directory(path.parent) as directory:
        directory.replace(path.name, data, mode=mode, failpoint=failpoint)
        if sync_dir:
            directory.fsync()
    if failpoint and sync_dir:
        failpoints.hit(_points(failpoint).after_dir_fsync)


def _open_regular(path: Path) -> int | None:
    """A read descriptor on the regular file at ``path``; None when nothing is there.

    ``lstat`` first, so a device, FIFO or socket is never opened at all; then the
    descriptor is checked again. A regular file renamed over ``path`` in between (another
    writer's ``atomic_write``) is simply opened again.
    """
    for _ in range(_TEMP_ATTEMPTS):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(path, f"is {file_kind(mode)}, not a regular file")
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                continue  # swapped for a symlink or socket since the lstat: look again
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
    raise UnsafeFileError(path, "keeps changing between a regular file and something else")


def read_file(path: Path, *, max_size: int) -> bytes | None:
    """The bytes of the regular file at ``path``, or None when nothing is there.

    Never follows a symlink, never blocks on a FIFO and never opens a device or socket.
    A file over ``max_size`` bytes is refused without reading it whole. Anything but a
    regular file raises ``UnsafeFileError``.
    """
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > max_size:
            raise UnsafeFileError(
                path, f"is {size} bytes, over the {max_size}-byte limit", code=errno.EFBIG
            )
        chunks: list[bytes] = []
        left = max_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    if left <= 0:
        raise UnsafeFileError(path, f"grew over the {max_size}-byte limit", code=errno.EFBIG)
    return b"".join(chunks)


def remove_file(path: Path, *, failpoint: str = "", sync_dir: bool = True) -> bool:
    """Unlink ``path`` durably; a missing file is success. Returns True if it existed.

    ``unlink`` never follows a symlink: at worst a planted link itself is removed. A
    directory at ``path`` is no file of ours (``atomic_write`` refuses to replace one):
    it is left alone and counts as nothing to remove.
    """
    try:
        directory = Directory(path.parent)
    except FileNotFoundError:
        return False
    with directory:
        existed = directory.remove(path.name, failpoint=failpoint)
        if existed and sync_dir:
            directory.fsync()
    return existed


def _unheld_temp(dir_fd: int, name: str, *, remove: bool) -> bool:
    """Whether ``name`` is a regular file no writer holds; with ``remove``, unlink it."""
    before = _lstat_at(dir_fd, name)
    if before is None or not stat.S_ISREG(before.st_mode):
        return False  # never made by ``atomic_write``: not ours to remove
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer is between create and rename
        if not remove:
            return True
        again = _lstat_at(dir_fd, name)
        if again is None or (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)  # under the lock: a late writer sees st_nlink == 0
        return True
    finally:
        os.close(fd)


def list_temp_files(directory: Path, *, target_prefix: str = "") -> list[Path]:
    """Temp files of ``atomic_write`` in ``directory`` that no live writer holds."""
    try:
        dir_fd = os.open(directory, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        return [
            directory / name
            for name in sorted(os.listdir(dir_fd))
            if is_temp_name(name, target_prefix=target_prefix)
            and _unheld_temp(dir_fd, name, remove=False)
        ]
    finally:
        os.close(dir_fd)


def sweep_temp_files(
    directory: Path, *, target_prefix: str = "", recursive: bool = False
) -> list[Path]:
    """Remove temp files an interrupted ``atomic_write`` left in ``directory``.

    Only entries named like ``atomic_write``'s temp files for a target starting with
    ``target_prefix``, that are regular files and that no live writer holds, are
    removed; anything else (another program's file, a symlink, a directory) is left
    alone. Symlinked subdirectories are never entered. Returns the removed paths.
    """
    removed: list[Path] = []
    try:
        dir_fd = os.open(directory, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return removed
    try:
        subdirs: list[str] = []
        with os.scandir(dir_fd) as entries:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for name, is_dir in sorted(names):
            if is_dir:
                subdirs.append(name)
            elif is_temp_name(name, target_prefix=target_prefix) and _unheld_temp(
                dir_fd, name, remove=True
            ):
                removed.append(directory / name)
        if removed:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    if recursive:
        for name in subdirs:
            removed += sweep_temp_files(
                directory / name, target_prefix=target_prefix, recursive=True
            )
    return removed


def ensure_private_dir(path: Path, *, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if needed and set its mode; returns it resolved.

    ``path`` itself must be a real directory: a symlink there is refused rather than
    followed, so the mode change can never land on a directory elsewhere.
    """
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    try:
        fd = os.open(path, _DIR_FLAGS | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = file_kind(os.lstat(path).st_mode)
            raise UnsafeFileError(path, f"is {kind}, not a directory") from exc
        raise
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path.resolve()


class FileLock:
    """An exclusive ``flock`` on a lock file, shared by every driver process on the node.

    Sync use (``with lock.hold():``) blocks; async use (``async with lock.acquire():``)
    polls with ``LOCK_NB`` so a waiting coroutine stays cancellable and never blocks the
    event loop. The lock file itself is never removed: removing it would let two
    processes lock two different inodes under one name.
    """

    def __init__(self, path: Path, *, poll_interval: float = 0.005) -> None:
        self.path = path
        self.poll_interval = poll_interval

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(self.path).st_mode
            if not stat.S_ISREG(mode):  # never open a device or FIFO, not even to look
                raise UnsafeFileError(self.path, f"is {file_kind(mode)}, not a lock file")
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeFileError(self.path, "is a symbolic link, not a lock file") from exc
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise UnsafeFileError(self.path, f"is {file_kind(mode)}, not a lock file")
        return fd

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _locked_current_inode(self, fd: int) -> bool:
        """After flock: is ``fd`` still the file at ``path`` (not one unlinked by a releaser)?"""
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    @contextlib.asynccontextmanager
    async def acquire(
        self, *, max_interval: float = 0.1, remove: bool = False
    ) -> AsyncIterator[None]:
        """Hold the lock; with ``remove`` the lock file is unlinked before release.

        Unlinking under the lock is safe because a waiter that then gets the flock on the
        old inode sees that the path no longer points at it and starts over.
        """
        interval = self.poll_interval
        while True:
            fd = self._open()
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except OSError as exc:
                        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                            raise
                    await asyncio.sleep(interval)
                    interval = min(interval * 2, max_interval)
            except BaseException:
                os.close(fd)
                raise
            if self._locked_current_inode(fd):
                break
            os.close(fd)
        try:
            yield
        finally:
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(fd)


_RANGE_SPACE = 1 << 62
# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (fcntl(2)); open file
# description locks need l_pid 0.
_FLOCK = struct.Struct("hhqqi4x")


class KeyedLocks:
    """Exclusive locks by key, shared by every driver process on the node, in ONE file.

    Each key locks its own byte of the lock file (an open file description lock,
    ``F_OFD_SETLK``, at an offset hashed from the key: the file stays empty). Taking one
    costs a single ``fcntl`` call; no file is created or removed per key, so a busy node
    never waits on its disk journal to lock a claim. Like ``flock``, the locks of two
    descriptors conflict even inside one process; one ``KeyedLocks`` does not serialise
    the same key twice itself (the claim engine holds an ``asyncio.Lock`` per claim
    around it). Distinct keys share a byte with odds of about 2**-62.
    """

    def __init__(self, path: Path, *, poll_interval: float = 0.002) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self._fd: int | None = None

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = FileLock(self.path)._open()
        return self._fd

    @staticmethod
    def offset(key: str) -> int:
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % _RANGE_SPACE

    def _set(self, fd: int, kind: int, start: int) -> None:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, start, 1, 0))

    @contextlib.asynccontextmanager
    async def acquire(self, key: str, *, max_interval: float = 0.1) -> AsyncIterator[None]:
        """Hold ``key``'s lock; waits (polling, cancellable) while another holder has it."""
        await self.lock(key, max_interval=max_interval)
        try:
            yield
        finally:
            self.unlock(key)

    async def lock(self, key: str, *, max_interval: float = 0.1) -> None:
        """Take ``key``'s lock (``acquire`` without the context manager)."""
        fd = self._descriptor()
        start = self.offset(key)
        interval = self.poll_interval
        while True:
            try:
                self._set(fd, fcntl.F_WRLCK, start)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            await asyncio.sleep(interval)
            interval = min(interval * 2, max_interval)

    def unlock(self, key: str) -> None:
        """Give back ``key``'s lock taken with ``lock``."""
        self._set(self._descriptor(), fcntl.F_UNLCK, self.offset(key))

    def close(self) -> None:
        """Drop every lock held through this object (a process that goes away)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
