"""The group machinery: how the claims of one group go through a step together.

A step runs for every claim of a group at once (``each``: bounded, a result or an
error per claim); ``survivors`` keeps the claims whose result is not an error and
whose follow-up passes, and hands the others to the group's failures (torn down
alone). Backend calls do not wait for a straggler (``backend_calls``: it goes on
alone after ``LATE_AFTER`` seconds). Prepare and teardown are written in these terms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dralet import failpoints, logs
from dralet.checkpoint.model import ClaimRecord
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims.calls import Calls
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.claims.specio import SpecWriter
from dralet.node.claims.store import RecordStore
from dralet.node.settings import DriverSettings
from dralet.node.tasks import raise_failure

__all__ = [
    "LATE_AFTER",
    "NOT_DONE",
    "Route",
    "RouteParts",
    "all_of",
    "backend_calls",
    "bound",
    "each",
    "each_now",
    "each_until_late",
    "hit_after",
    "ignore",
    "only",
    "ref_of",
    "survivors",
]

log = logging.getLogger("dralet.node.claims")

T = TypeVar("T")
R = TypeVar("R")
_I = TypeVar("_I")

NOT_DONE = AssertionError("claim left without an answer")
LATE_AFTER = 1.0
"""Seconds a claim's backend prepare or release may run on after the rest of its
group's are done before the group goes on without it (the claim then finishes alone):
a device that hangs until ``backend_call_timeout`` holds back neither its group nor,
through the group's slots, other calls."""


@dataclass(frozen=True)
class RouteParts:
    """What every route (prepare, teardown, repairs) works with."""

    settings: DriverSettings
    store: RecordStore
    spec_io: SpecWriter
    metadata_files: MetadataFiles
    calls: Calls
    metrics: DriverMetrics


class Route:
    """A route's parts as its attributes; every method of a route expects the locks of
    the claims it is given held."""

    def __init__(self, parts: RouteParts) -> None:
        self.settings = parts.settings
        self.store = parts.store
        self.spec_io = parts.spec_io
        self.metadata_files = parts.metadata_files
        self.calls = parts.calls
        self.metrics = parts.metrics


def only(results: Sequence[T | BaseException]) -> T:
    """The result of a step run for a group of one claim; its error raised."""
    (result,) = results
    if isinstance(result, BaseException):
        raise result
    return result


def each_now(items: Sequence[_I], call: Callable[[_I], R]) -> list[R | Exception]:
    """``call`` of every item in turn, here (a worker thread's file work for a group):
    a result or the error each."""
    found: list[R | Exception] = []
    for item in items:
        try:
            found.append(call(item))
        except Exception as exc:  # noqa: BLE001 - this item's own answer
            found.append(exc)
    return found


def ref_of(record: ClaimRecord) -> ClaimRef:
    return ClaimRef(ClaimUID(record.uid), record.namespace, record.name)


def bound(ref: ClaimRef) -> contextlib.AbstractContextManager[None]:
    """Every log line inside names the claim."""
    return logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}")


def ignore(item: object, result: object) -> None:
    """A step whose result needs nothing more (its error, if any, fails the claim)."""


def hit_after(point: str) -> Callable[[object, object], None]:
    """A step's follow-up that only hits the failpoint ``point``."""

    def step(item: object, _: object) -> None:
        failpoints.hit(point)

    return step


def survivors(
    live: Sequence[_I],
    results: Sequence[T | BaseException],
    failed: list[tuple[_I, Exception]],
    step: Callable[[_I, T], None],
) -> list[_I]:
    """The claims whose result of a step is not an error and whose ``step`` (what
    follows the result: checks, a failpoint) passes; the others go to ``failed``."""
    kept: list[_I] = []
    for item, result in zip(live, results, strict=True):
        try:
            if isinstance(result, BaseException):
                raise result
            step(item, result)
        except Exception as exc:  # noqa: BLE001 - this claim's own failure
            failed.append((item, exc))
            continue
        kept.append(item)
    return kept


async def all_of(work: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run ``work`` together; if one raises (a failpoint's crash), the rest are
    cancelled, not left running on."""
    if len(work) == 1:
        await work[0]
        return
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise


async def backend_calls(
    items: Sequence[_I], call: Callable[[_I], Awaitable[T]], what: str, *, limit: int
) -> tuple[list[_I], list[T | Exception], list[tuple[_I, asyncio.Future[T | Exception]]]]:
    """``call`` of each item (at most ``limit`` at once): the items done on time and
    their results, and those left late (``LATE_AFTER``), each with its future."""
    results, late = await each_until_late(items, call, limit=limit, patience=LATE_AFTER)
    if late:
        log.warning(
            "%d of %d %s still running %g s after the others of their group; "
            "those claims go on alone",
            len(late),
            len(items),
            what,
            LATE_AFTER,
        )
    on_time = [i for i in range(len(items)) if i not in late]
    return (
        [items[i] for i in on_time],
        [results[i] for i in on_time],
        [(items[i], future) for i, future in late.items()],
    )


async def each(
    items: Sequence[T], call: Callable[[T], Awaitable[R]], *, limit: int
) -> list[R | Exception]:
    """``call`` of every item, at most ``limit`` in flight; a result or the error each.

    ``limit`` workers take the next item in turn: a task per item costs more than the
    calls in a 1,000-claim batch. One item is called directly (no task at all).
    """
    found: list[R | Exception] = [AssertionError("never called")] * len(items)
    if len(items) == 1:
        try:
            found[0] = await call(items[0])
        except Exception as exc:  # noqa: BLE001 - this item's own answer
            found[0] = exc
        return found
    pending = iter(enumerate(items))

    async def worker() -> None:
        for index, item in pending:
            try:
                found[index] = await call(item)
            except Exception as exc:  # noqa: BLE001 - this item's own answer
                found[index] = exc

    await asyncio.gather(*(worker() for _ in range(min(limit, len(items)))))
    return found


_LATE_WORKERS: set[asyncio.Task[None]] = set()


async def each_until_late(
    items: Sequence[T], call: Callable[[T], Awaitable[R]], *, limit: int, patience: float
) -> tuple[list[R | Exception], dict[int, asyncio.Future[R | Exception]]]:
    """``each``, not waiting for stragglers: once every item has started and each call
    still running has run ``patience`` seconds, those items are left late (by index),
    each with a future its result will come through; the others' results are returned.
    A late call runs on until it answers through its future; cancelling that future
    cancels the call.
    """
    late: dict[int, asyncio.Future[R | Exception]] = {}
    if len(items) <= 1:  # no other item to hold up
        return await each(items, call, limit=limit), late
    found: list[R | Exception] = [AssertionError("never called")] * len(items)
    loop = asyncio.get_running_loop()
    pending = iter(enumerate(items))
    running: dict[int, tuple[float, asyncio.Task[Any] | None]] = {}  # index → began, by
    taken = 0

    async def worker() -> None:
        nonlocal taken
        for index, item in pending:
            taken += 1
            running[index] = (loop.time(), asyncio.current_task())
            try:
                result: R | Exception = await call(item)
            except Exception as exc:  # noqa: BLE001 - this item's own answer
                result = exc
            except BaseException as exc:  # cancelled, or the process "dying" at a failpoint
                _settle_late(late.get(index), exc)
                raise
            finally:
                del running[index]
            found[index] = result
            _settle_late(late.get(index), result)

    workers = [loop.create_task(worker()) for _ in range(min(limit, len(items)))]
    try:
        timeout = patience
        while True:
            finished, alive = await asyncio.wait(
                workers, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            raise_failure(finished)  # a BaseException (the process "dying" at a failpoint)
            if not alive:
                break
            # With every item taken, only the calls still running hold the others up,
            # and only until the youngest of them has run ``patience`` seconds.
            waited = loop.time() - max((t for t, _ in running.values()), default=loop.time())
            if taken == len(items) and running and waited >= patience:
                for index, (_, by) in running.items():
                    late[index] = future = loop.create_future()
                    if by is not None:
                        future.add_done_callback(_cancelling(by))
                for task in alive:  # kept alive until they answer (the loop holds tasks weakly)
                    _LATE_WORKERS.add(task)
                    task.add_done_callback(_LATE_WORKERS.discard)
                break
            timeout = max(patience - waited, patience / 10)
    except BaseException:
        # Cancelled, or one call "died": the others are cancelled and waited for (as
        # ``each``'s gather does), so none runs on past the caller's claim locks.
        for task in workers:
            task.cancel()
        await asyncio.wait(workers)
        raise
    return found, late


def _cancelling(task: asyncio.Task[Any]) -> Callable[[asyncio.Future[Any]], None]:
    """A late future's callback: its call is cancelled when the future is."""

    def cancelled(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            task.cancel()

    return cancelled


def _settle_late(future: asyncio.Future[Any] | None, outcome: object) -> None:
    """Hand a late item's outcome to its future (unless no one waits for it any more)."""
    if future is None or future.done():
        return
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
