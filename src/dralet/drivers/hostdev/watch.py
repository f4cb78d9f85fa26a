"""Waking the hostdev driver when device nodes come and go: inotify on the directories
its globs point into, with a periodic rescan as the fallback (and the only way where
inotify is unavailable, or a node appears where no watch reaches)."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
from collections.abc import Sequence

import dralet

__all__ = ["NodeEvents", "watched_directories"]

log = logging.getLogger(__name__)

MASK = (
    dralet.InotifyEvents.CREATE
    | dralet.InotifyEvents.DELETE
    | dralet.InotifyEvents.MOVED_FROM
    | dralet.InotifyEvents.MOVED_TO
    | dralet.InotifyEvents.ATTRIB
    | dralet.InotifyEvents.DELETE_SELF
    | dralet.InotifyEvents.MOVE_SELF
)


def watched_directories(patterns: Sequence[str]) -> list[str]:
    """For each glob, the deepest directory without a wildcard that exists now (a glob
    under ``/dev/serial/by-id`` is watched at ``/dev`` until that directory appears)."""
    found: set[str] = set()
    for pattern in patterns:
        directory = os.path.dirname(pattern)
        while glob.has_magic(directory):
            directory = os.path.dirname(directory)
        while directory != "/" and not os.path.isdir(directory):
            directory = os.path.dirname(directory)
        found.add(directory or "/")
    return sorted(found)


class NodeEvents:
    """inotify watches on ``watched_directories(patterns)``; ``wait`` returns when one of
    them changes or ``timeout`` passes."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        self._inotify: dralet.Inotify | None = None
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> bool:
        """Watch from now on (on the running loop); False when only rescans will tell."""
        try:
            self._inotify = dralet.Inotify()
        except dralet.InotifyUnavailableError as exc:
            log.warning("no inotify (%s): device changes are seen by rescans only", exc.strerror)
            return False
        self._add_watches()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._inotify.fileno(), self._on_readable)
        return True

    def _add_watches(self) -> None:
        assert self._inotify is not None
        for directory in watched_directories(self.patterns):
            try:
                self._inotify.add(directory, MASK)
            except OSError as exc:
                log.warning("cannot watch %s (%s): rescans only", directory, exc.strerror)

    def _on_readable(self) -> None:
        assert self._inotify is not None
        if any(True for _ in self._inotify.read()):
            self._changed.set()

    async def wait(self, within: float) -> bool:
        """True when a watched directory changed, False when ``within`` seconds passed first."""
        try:
            await asyncio.wait_for(self._changed.wait(), within)
        except TimeoutError:
            return False
        self._changed.clear()
        if self._inotify is not None:
            self._add_watches()  # a directory that appeared is watched from now on
        return True

    def close(self) -> None:
        if self._inotify is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None
