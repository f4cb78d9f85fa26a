"""A call's claims in groups: scheduled on fairly shared slots, and moved through each
step together.

Scheduling: a call carrying 20,000 claims and one carrying a single claim both queue for
the same ``max_parallel_claims`` slots; a freed slot goes to the calls in turn (round
robin), not to whichever claim queued first, so the one-claim call waits for at most
one slot per call ahead of it. A group is as many of a call's claims as it got slots
for; the engine decides what a group does (``ClaimEngine._run_group``) and which claim
goes on alone.

Steps: a step runs for every claim of a group at once (``each``: bounded, a result or an
error per claim); ``survivors`` keeps the claims whose result is not an error and whose
follow-up passes, and hands the others to the group's failures (torn down alone).
Backend calls do not wait for a straggler (``backend_calls``: it goes on alone after
``LATE_AFTER`` seconds). Prepare and teardown are written in these terms.

Over 500 lines on purpose: the scheduler that forms a call's groups and the steps a group
runs are one machine, read together; apart, a prepare would run code in one more file.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dralet import errors, failpoints, gcpause, logs
from dralet.checkpoint.model import ClaimRecord, DeviceRecord
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims.calls import Calls
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.claims.store import RecordStore, SpecWriter
from dralet.node.settings import DriverSettings
from dralet.tasks import TaskSet, raise_failure

__all__ = [
    "LATE_AFTER",
    "NOT_DONE",
    "Alone",
    "Call",
    "FairSlots",
    "Held",
    "PrepareOutcome",
    "Route",
    "RouteParts",
    "Scheduler",
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


@dataclass(frozen=True)
class PrepareOutcome:
    devices: tuple[DeviceRecord, ...] = ()
    error: str = ""


@dataclass(eq=False)
class Call:
    """One RPC's claims, answered before ``deadline`` (monotonic seconds). Compared and
    hashed by identity: it is the key of its turn in ``FairSlots``."""

    operation: str
    refs: Sequence[ClaimRef]
    deadline: float
    outcomes: dict[str, PrepareOutcome] = field(default_factory=dict)
    irreversible: BaseException | None = None
    """The first irreversible failure: the call's answer (Internal), given once every
    other claim has its own."""
    all_answered: asyncio.Future[None] | None = None
    """Resolved once every claim has its outcome (set for calls that may be answered
    before their work is over: an unprepare, whose finalizer removals follow it)."""

    distinct: int = field(init=False)
    """How many claims (UIDs) the call names: each answer compares with it, so a call
    of 1,000 claims counts its UIDs once, not at each of its 1,000 answers."""

    def __post_init__(self) -> None:
        self.distinct = len({ref.uid for ref in self.refs})

    def answered(self, uid: str, outcome: PrepareOutcome) -> None:
        self.outcomes[uid] = outcome
        if (
            self.all_answered is not None
            and not self.all_answered.done()
            and len(self.outcomes) >= self.distinct
        ):
            self.all_answered.set_result(None)

    def failed_irreversibly(self, exc: BaseException) -> None:
        if self.irreversible is None:
            self.irreversible = exc
        else:
            log.error("another irreversible failure in the same call: %s", exc)


class Held:
    """The slots a group holds: one per claim still at work. A claim answered gives its
    slot back at once; a claim going on alone takes its slot with it."""

    def __init__(self, slots: FairSlots, count: int) -> None:
        self._slots = slots
        self.count = count

    def give_back(self, count: int = 1) -> None:
        count = min(count, self.count)
        self.count -= count
        self._slots.release(count)

    def hand_over(self) -> None:
        """One slot passes to a claim going on alone (which releases it when done)."""
        assert self.count > 0, "a claim going on alone holds a slot of its group"
        self.count -= 1


GC_PAUSE_CLAIMS = 32
"""A call of this many claims runs with the cyclic collector paused (``dralet.gcpause``):
its full collections would scan every object the process holds several times over."""


Alone = tuple[ClaimRef, float]
"""A claim going on alone, after so many seconds."""
RunGroup = Callable[[Call, Sequence[ClaimRef], Held], Awaitable[list[Alone]]]
"""Runs a group of a call's claims (on the slots it holds); the claims that go on alone."""
RunAlone = Callable[[Call, ClaimRef], Awaitable[PrepareOutcome]]
"""Runs one claim of a call on the one-claim route; its answer."""


class Scheduler:
    """Runs calls: each call's claims in groups on fairly shared slots, every claim
    answered by the call's deadline."""

    def __init__(
        self, settings: DriverSettings, work: TaskSet, *, group: RunGroup, alone: RunAlone
    ) -> None:
        self.settings = settings
        self.work = work
        self._group = group
        self._one = alone
        self._slots = FairSlots(settings.max_parallel_claims)
        self._workers: set[asyncio.Task[None]] = set()

    async def run(self, call: Call) -> dict[str, PrepareOutcome]:
        """Run a call's claims on fairly shared slots; answer every claim by the deadline.

        The workers are engine-owned tasks: if the caller gives up, a claim already
        started still finishes and records its outcome (a later call waits on its lock);
        a claim not started yet is not started.
        """
        queue = list(reversed(call.refs))
        if call.operation == "unprepare":
            call.all_answered = asyncio.get_running_loop().create_future()
        workers = [self.work.spawn(f"{call.operation}-worker", self._groups(call, queue))]
        self._workers.update(workers)
        for worker in workers:
            worker.add_done_callback(self._workers.discard)
        waited: list[asyncio.Future[Any]] = [*workers]
        if call.all_answered is not None:
            waited.append(call.all_answered)
        bulk = gcpause.paused() if len(call.refs) >= GC_PAUSE_CLAIMS else contextlib.nullcontext()
        try:
            with bulk:
                remaining = max(0.0, call.deadline - time.monotonic())
                # Never cancels them; an unprepare is answered once every claim is.
                await asyncio.wait(waited, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            queue.clear()  # whatever was not started stays unstarted
            if call.all_answered is not None and not call.all_answered.done():
                call.all_answered.cancel()  # the call ends unanswered: what waits on it goes on
        raise_failure(workers)  # the process dying at a failpoint (not an Exception)
        if call.irreversible is not None:
            raise call.irreversible
        for ref in call.refs:
            if ref.uid not in call.outcomes:
                call.outcomes[ref.uid] = PrepareOutcome(
                    error=f"{call.operation} not finished within the call's time budget "
                    f"({self.settings.call_budget:g} s); retry"
                )
        return {ref.uid: call.outcomes[ref.uid] for ref in call.refs}

    async def _groups(
        self,
        call: Call,
        queue: list[ClaimRef],
    ) -> None:
        """Run a call's claims in groups, each as many claims as it got slots for: one
        slot in the call's turn, and then every slot free at that moment. A claim going
        on alone (``_alone``) runs beside the call's next groups, on its own slot; the
        call ends when every group and every claim gone alone has ended."""
        alone: list[asyncio.Task[None]] = []
        while queue:
            held = Held(self._slots, await self._slots.acquire_some(call, len(queue)))
            group = [queue.pop() for _ in range(min(held.count, len(queue)))]
            try:
                if not group or time.monotonic() >= call.deadline:
                    break
                held.give_back(held.count - len(group))
                for ref, delay in await self._group(call, group, held):
                    held.hand_over()
                    alone.append(
                        self.work.spawn(f"{call.operation}-alone", self._alone(call, ref, delay))
                    )
            finally:
                held.give_back(held.count)
            await asyncio.sleep(0)  # other calls' groups get their turn
        if alone:
            await asyncio.wait(alone)
            raise_failure(alone)  # the process "dying" at a failpoint on the one-claim route

    async def _alone(self, call: Call, ref: ClaimRef, delay: float) -> None:
        """One claim of a group on the one-claim route (after ``delay`` seconds), on the
        slot its group handed over."""
        try:
            if delay:
                await asyncio.sleep(delay)
            call.answered(ref.uid, await self._one(call, ref))
        except errors.IrreversibleError as exc:
            call.failed_irreversibly(exc)
        finally:
            self._slots.release()

    async def settled(self) -> None:
        """Wait for the work of the calls answered so far (an unprepare's owed finalizer
        removals) to end; raises what one of them died of (a failpoint's simulated
        crash after the answer)."""
        while self._workers:
            ended, _ = await asyncio.wait(set(self._workers))
            raise_failure(ended)


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
