"""The call scheduler: each call's claims run in groups on slots shared fairly.

A call carrying 20,000 claims and one carrying a single claim both queue for the same
``max_parallel_claims`` slots; a freed slot goes to the calls in turn (round robin), not
to whichever claim queued first. So the one-claim call waits for at most one slot per
call ahead of it, however many claims those calls carry. A group is as many of a
call's claims as it got slots for; what a group does with them is the engine's
(``ClaimEngine._run_group``), as is a claim that goes on alone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dralet import errors, gcpause
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import ClaimRef
from dralet.node.settings import DriverSettings
from dralet.node.tasks import TaskSet, raise_failure

__all__ = ["Alone", "Call", "FairSlots", "Held", "PrepareOutcome", "Scheduler"]

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
