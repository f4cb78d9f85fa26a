"""Prepare slots shared fairly across calls, so no call can starve another.

A call carrying 20,000 claims and one carrying a single claim both queue for the same
``max_parallel_claims`` slots; a freed slot goes to the calls in turn (round robin), not
to whichever claim queued first. So the one-claim call waits for at most one slot per
call ahead of it, however many claims those calls carry.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

__all__ = ["FairSlots"]


class FairSlots:
    def __init__(self, slots: int) -> None:
        self._free = max(1, slots)
        self._waiting: dict[object, collections.deque[asyncio.Future[None]]] = {}
        self._turns: collections.deque[object] = collections.deque()

    async def acquire(self, call: object) -> None:
        """Take a slot for one of ``call``'s claims; hand it back with ``release``."""
        if self._free > 0 and not self._turns:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.get(call)
        if queue is None:
            queue = self._waiting[call] = collections.deque()
            self._turns.append(call)
        queue.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            elif self._waiting.get(call) is queue and future in queue:
                # (A release in the same turn may have taken it off already, even the
                # whole queue: then there is nothing left of it to forget.)
                queue.remove(future)
                if not queue:
                    self._forget(call)
            raise

    async def acquire_some(self, call: object, wanted: int) -> int:
        """Take a slot for ``call`` in its turn, and then as many more of those free now
        as it wants (up to ``wanted`` in all, never waiting again); how many it holds.

        Waiting once for one slot and never while holding any is what keeps two calls
        that each want many from waiting on each other's slots for ever.
        """
        await self.acquire(call)
        extra = 0 if self._turns else min(self._free, max(0, wanted - 1))
        self._free -= extra
        return 1 + extra

    def _forget(self, call: object) -> None:
        self._waiting.pop(call, None)
        with contextlib.suppress(ValueError):
            self._turns.remove(call)

    def release(self, count: int = 1) -> None:
        """Hand back ``count`` slots, each to the next call in turn (or to the free ones)."""
        for _ in range(count):
            self._release_one()

    def _release_one(self) -> None:
        while self._turns:
            call = self._turns.popleft()
            queue = self._waiting[call]
            future = queue.popleft()
            if queue:
                self._turns.append(call)
            else:
                del self._waiting[call]
            if not future.done():
                future.set_result(None)
                return
        self._free += 1
