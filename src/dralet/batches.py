"""One thread that runs queued work in batches: the group-commit pattern, in one place.

Callers on the event loop ``await submit(item)``; the items submitted in one turn of
the loop are handed over together at its end, and the thread takes every item waiting
when it gets to them (up to ``max_batch``) and hands the list to ``run``, which returns
one result per item: a value, or the exception that item failed with. An exception out
of ``run`` itself fails every item of the batch. Blocking work (fsync, rename, unlink)
therefore never runs on the event loop, and work that arrives together shares one
durable sync.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from dralet import errors

__all__ = ["BatchThread", "in_groups", "settle_future"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Pending(Generic[T, R]):
    item: T
    future: asyncio.Future[R]
    loop: asyncio.AbstractEventLoop


class BatchThread(Generic[T, R]):
    def __init__(
        self,
        name: str,
        run: Callable[[Sequence[T]], Sequence[R | BaseException]],
        *,
        max_batch: int = 4096,
        size: Callable[[T], int] = lambda _: 1,
    ) -> None:
        self.name = name
        self._run = run
        self._max_batch = max_batch
        self._size = size
        self._queue: queue.SimpleQueue[list[_Pending[T, R]] | None] = queue.SimpleQueue()
        self._held: dict[asyncio.AbstractEventLoop, list[_Pending[T, R]]] = {}
        """Items submitted in this turn of each event loop, handed over together at its end."""
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    async def submit(self, item: T) -> R:
        """``item``'s result once its batch ran; raises the exception it failed with."""
        (future,) = self._enqueue([item])
        return await future

    def _enqueue(self, items: Sequence[T]) -> list[asyncio.Future[R]]:
        """Hold the items until the end of the event loop's turn: the claims of a call
        resumed in one turn wake the thread once, with all of their items, instead of
        once per item (each wake-up is a GIL handoff that slows the loop)."""
        if self._stopped:
            raise self._closed()
        loop = asyncio.get_running_loop()
        pending = [_Pending(item, loop.create_future(), loop) for item in items]
        if not pending:
            return []
        held = self._held.get(loop)
        if held is None:
            held = self._held[loop] = []
            loop.call_soon(self._hand_over, loop)
        held.extend(pending)
        return [p.future for p in pending]

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        held = self._held.pop(loop, [])
        with self._lock:
            if not self._stopped:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                    self._thread.start()
                self._queue.put(held)
                return
        closed = self._closed()
        for pending in held:
            settle_future(pending.future, closed)

    def _closed(self) -> errors.TemporaryError:
        return errors.TemporaryError(f"{self.name} is closed (driver stopping)")

    def stop(self) -> None:
        """Run what was already handed over, then end the thread (blocks until it has)."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
            if thread is not None and thread.is_alive():
                self._queue.put(None)
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        waiting: collections.deque[_Pending[T, R]] = collections.deque()
        stopping = False
        while True:
            if not waiting:
                if stopping:
                    return
                first = self._queue.get()
                if first is None:
                    return
                waiting.extend(first)
            while not stopping:  # everything else already handed over
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True  # end once what is waiting has run
                else:
                    waiting.extend(more)
            if not waiting:
                continue  # an empty hand-over
            batch = [waiting.popleft()]
            size = self._size(batch[0].item)
            while waiting and size < self._max_batch:
                batch.append(waiting.popleft())
                size += self._size(batch[-1].item)
            try:
                results: Sequence[R | BaseException] = self._run([p.item for p in batch])
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                results = [exc] * len(batch)
            _resolve(list(zip(batch, results, strict=True)))


def in_groups(
    run: Callable[[Sequence[T]], Sequence[R]],
) -> Callable[[Sequence[Sequence[T]]], list[list[R] | BaseException]]:
    """``run`` for a ``BatchThread`` whose items are groups of work (use ``size=len``):
    a caller with many pieces of work (a chunk of recovery) submits them as ONE item,
    one future, and gets a result per piece; the thread still runs the pieces of every
    waiting group in one call."""

    def grouped(groups: Sequence[Sequence[T]]) -> list[list[R] | BaseException]:
        results = run([piece for group in groups for piece in group])
        split: list[list[R] | BaseException] = []
        start = 0
        for group in groups:
            split.append(list(results[start : start + len(group)]))
            start += len(group)
        return split

    return grouped


def _resolve(done: list[tuple[_Pending[T, R], R | BaseException]]) -> None:
    """Hand a batch's results to their callers: one wake-up per event loop, not per item."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Pending[T, R], R | BaseException]]] = {}
    for pending, result in done:
        by_loop.setdefault(pending.loop, []).append((pending, result))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[_Pending[T, R], R | BaseException]]) -> None:
    for pending, result in settled:
        settle_future(pending.future, result)


def settle_future(future: asyncio.Future[R], result: R | BaseException) -> None:
    """Give ``future`` its result, or raise ``result`` in its waiter (a cancellation
    cancels it); nothing when it is done already (its waiter was cancelled)."""
    if future.done():
        return
    if isinstance(result, asyncio.CancelledError):
        future.cancel()
    elif isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
