"""Crash-safe file primitives: atomic write, idempotent remove, private dirs, file locks.

The one recipe for durable state: write a temp file in the same directory, fsync it,
rename it over the target, fsync the directory. A reader sees the old bytes or the new
bytes, never a mix, and after a crash the rename is either durable or absent. Used by
``dralet.cdi`` and ``dralet.checkpoint``; nothing else writes state files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from dralet import failpoints

__all__ = [
    "FileLock",
    "atomic_write",
    "ensure_private_dir",
    "fsync_dir",
    "remove_file",
]

TEMP_SUFFIX = ".tmp"


def _declare(tag: str) -> None:
    failpoints.declare(
        f"{tag}.before-fsync",
        f"{tag}.after-fsync",
        f"{tag}.after-rename",
        f"{tag}.after-dir-fsync",
    )


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, failpoint: str = "") -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    The temp file starts with a dot and ends in ``.tmp``: CDI runtimes load only
    ``.json``/``.yaml`` files and the kubelet ignores dot files, so a half-written temp
    file is never picked up. On any error the temp file is removed and ``path`` keeps
    its previous content.
    """
    if failpoint:
        _declare(failpoint)
    directory = path.parent
    tmp = directory / f".{path.name}.{os.getpid()}{TEMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if failpoint:
                failpoints.hit(f"{failpoint}.before-fsync")
            os.fsync(fd)
        finally:
            os.close(fd)
        if failpoint:
            failpoints.hit(f"{failpoint}.after-fsync")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if failpoint:
        failpoints.hit(f"{failpoint}.after-rename")
    fsync_dir(directory)
    if failpoint:
        failpoints.hit(f"{failpoint}.after-dir-fsync")


def remove_file(path: Path, *, failpoint: str = "") -> bool:
    """Unlink ``path`` durably; a missing file is success. Returns True if it existed."""
    if failpoint:
        failpoints.declare(f"{failpoint}.before-unlink", f"{failpoint}.after-unlink")
        failpoints.hit(f"{failpoint}.before-unlink")
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    if failpoint:
        failpoints.hit(f"{failpoint}.after-unlink")
    fsync_dir(path.parent)
    return True


def ensure_private_dir(path: Path, *, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if needed and set its mode; returns it resolved."""
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    os.chmod(path, mode)
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
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

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
