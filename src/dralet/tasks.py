"""Named, guarded background tasks with a staged shutdown (drain, then cancel)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

__all__ = ["TaskSet", "raise_failure"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskSet:
    """Owns a set of tasks: every one is named, its failure is logged, none outlives it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, name: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("background task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, within: float) -> bool:
        """Wait up to ``within`` s for the tasks to finish; True if all did."""
        if not self._tasks:
            return True
        _, pending = await asyncio.wait(set(self._tasks), timeout=within)
        return not pending

    async def cancel_all(self) -> None:
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def close(self, *, grace: float) -> None:
        """Staged shutdown: let running work finish for ``grace`` s, then cancel the rest."""
        if not await self.drain(grace):
            log.warning(
                "%s: cancelling %d tasks still running after %.1fs", self.name, len(self), grace
            )
        await self.cancel_all()


def raise_failure(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Raise what the first of ``tasks`` that ended with an exception ended with (those
    still running or cancelled are passed over)."""
    for task in tasks:
        if task.done() and not task.cancelled() and (failure := task.exception()) is not None:
            raise failure
