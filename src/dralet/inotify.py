"""Linux inotify through ctypes: a non-blocking descriptor, watches, and its events.

Used where dralet waits on a directory: ``dralet conformance`` (how spec files appear
in a CDI dir) and the hostdev driver (device nodes appearing and going; a driver reaches
it as ``dralet.Inotify``). The event bits are those of ``<sys/inotify.h>``.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Event", "Inotify", "InotifyEvents", "InotifyUnavailableError"]


class InotifyEvents(enum.IntFlag):
    """The events a watch asks for (``IN_*`` of ``<sys/inotify.h>``)."""

    MODIFY = 0x002
    ATTRIB = 0x004
    MOVED_FROM = 0x040
    MOVED_TO = 0x080
    CREATE = 0x100
    DELETE = 0x200
    DELETE_SELF = 0x400
    MOVE_SELF = 0x800


_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")
_READ_SIZE = 65536


class InotifyUnavailableError(OSError):
    """This system (or this process's limits) gives no inotify descriptor."""


@dataclass(frozen=True)
class Event:
    """One event: the watch it came from, its mask, and the entry's name ('' for the
    watched directory itself)."""

    watch: int
    mask: int
    name: str


class Inotify:
    """One inotify descriptor, non-blocking; ``fileno()`` for ``loop.add_reader``."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(self._libc, "inotify_init1"):
            raise InotifyUnavailableError(errno.ENOSYS, "this system has no inotify")
        fd = int(self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        if fd < 0:
            error = ctypes.get_errno()
            raise InotifyUnavailableError(error, f"inotify_init1: {os.strerror(error)}")
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def add(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watch ``path`` for ``mask``; the watch descriptor. ``FileNotFoundError`` when
        there is nothing at ``path`` (yet)."""
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask))
        if wd < 0:
            error = ctypes.get_errno()
            if error == errno.ENOENT:
                raise FileNotFoundError(error, os.strerror(error), str(path))
            raise OSError(error, f"inotify_add_watch {path}: {os.strerror(error)}")
        return wd

    def read(self) -> Iterator[Event]:
        """Every event waiting now (none when nothing is waiting)."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                yield Event(watch=wd, mask=mask, name=raw.rstrip(b"\0").decode(errors="replace"))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
