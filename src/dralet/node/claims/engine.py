"""The claim engine: the ONE owner of claim state on a node.

Every path is observe → plan → execute under the claim's lock. A claim UID from
``NodePrepareResources`` to its CDI file and record, one named function per line:

    service._DRAImplementation.prepare → service.parse_claims (the edge's checks)
    ClaimEngine.prepare → _run_call → _prepare_groups (a group: fair slots)
    _prepare_group (the group's claim locks, observe_group → plan.plan_prepare)
        → execute.Steps.prepare_fresh_many (each step once for the whole group)
        → RecordStore.intents/put_many (one commit each) / SpecWriter.write_many (the
          CDI files) → _answered (errors acted on, per claim)
    A claim with interrupted work to finish first, or one that failed temporarily, goes
    on alone: _timed → _prepare_claim (claim lock, retries) → _prepare_planned.
    Unprepare runs the same way: _unprepare_group → execute.Steps.teardown_many.

Unprepare, recovery at start, stale-claim cleanup and ``dralet audit --fix`` plan with
the same ``plan`` functions and execute through the same ``Steps`` (``settle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dralet import errors, gcpause, logs
from dralet.cdi import store as cdi_store
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import ClaimRecord, DeviceRecord
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef
from dralet.node.batches import settle_future
from dralet.node.claims import plan, settle
from dralet.node.claims.calls import Calls
from dralet.node.claims.execute import Steps
from dralet.node.claims.fairness import FairSlots
from dralet.node.claims.observe import ClaimView, Mode, read_boot_id
from dralet.node.claims.source import (
    ClaimSource,
    DeviceStatusWriter,
    NoClaimSource,
    finalizer_name,
)
from dralet.node.claims.store import RecordStore
from dralet.node.invoke import AnyBackend, Invoker, normalize
from dralet.node.settings import DriverSettings
from dralet.node.tasks import TaskSet, raise_failure

__all__ = ["ClaimEngine", "Mode", "PrepareOutcome"]

log = logging.getLogger("dralet.node.claims")


@dataclass(frozen=True)
class PrepareOutcome:
    devices: tuple[DeviceRecord, ...] = ()
    error: str = ""


@dataclass(eq=False)
class _Call:
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

    def answered(self, uid: str, outcome: PrepareOutcome) -> None:
        self.outcomes[uid] = outcome
        if (
            self.all_answered is not None
            and not self.all_answered.done()
            and len(self.outcomes) >= len({ref.uid for ref in self.refs})
        ):
            self.all_answered.set_result(None)

    def failed_irreversibly(self, exc: BaseException) -> None:
        if self.irreversible is None:
            self.irreversible = exc
        else:
            log.error("another irreversible failure in the same call: %s", exc)


class _Held:
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
INLINE_CHECKS = 8
"""Claims observed in one turn whose files are checked on the event loop; more go to a
worker thread together."""

_Check = tuple[str, ClaimRecord | None, "asyncio.Future[bool]"]


class _Route(enum.Enum):
    """Where a claim of a group goes once observed (unless it is answered at once)."""

    TOGETHER = "together"
    ALONE = "alone"


_Sorted = _Route | Callable[[ClaimRef, ClaimView], PrepareOutcome]
_A = TypeVar("_A")
_Alone = tuple[ClaimRef, float]
"""A claim going on alone, after so many seconds."""
_Early = Callable[[int, ClaimRecord | None], None]
"""Told each claim of a group as soon as it is done (its index in the group): its
record when prepared, None when gone."""


def _outcome_of(_: ClaimRef, result: ClaimRecord | BaseException | None) -> PrepareOutcome:
    """A grouped claim's answer: the devices it was prepared with (nothing for an
    unprepare), or its error raised."""
    if isinstance(result, BaseException):
        raise result
    return PrepareOutcome(devices=result.devices if result is not None else ())


def _settle_checks(
    pending: Sequence[_Check], answers: BaseException | Sequence[bool | BaseException]
) -> None:
    for index, (_, _, future) in enumerate(pending):
        settle_future(future, answers if isinstance(answers, BaseException) else answers[index])


class ClaimEngine:
    def __init__(
        self,
        settings: DriverSettings,
        *,
        backend: AnyBackend | Invoker,
        claims: ClaimSource | None,
        metrics: DriverMetrics | None = None,
    ) -> None:
        self.settings = settings
        if (
            settings.write_device_status
            and claims is not None
            and not isinstance(claims, DeviceStatusWriter)
        ):
            raise ValueError(
                f"write_device_status: {type(claims).__name__} cannot write claim status "
                "(it has no apply_device_status)"
            )
        invoker = normalize(backend, timeout=settings.backend_call_timeout)
        self.metrics = metrics or DriverMetrics()
        self.store = RecordStore(settings, boot_id=read_boot_id(settings), metrics=self.metrics)
        self.metrics.claims_prepared.set_function(self.store.count_prepared)
        self.metrics.finalizer_removals_owed.set_function(self.store.count_released)
        self.specs = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
        self.calls = Calls(
            invoker,
            claims or NoClaimSource(),
            finalizer=finalizer_name(settings.driver_name),
            api_limit=settings.max_parallel_api_calls,
            backend_limit=settings.max_parallel_backend_calls,
        )
        self.steps = Steps(
            settings, store=self.store, specs=self.specs, calls=self.calls, metrics=self.metrics
        )
        self.mode = Mode()
        self.work = TaskSet("claims")
        self._slots = FairSlots(settings.max_parallel_claims)
        self._stale_since: dict[str, float] = {}
        self.pending_recovery: set[str] = set()
        """Claims whose recovery step failed (disk full, read-only); retried with backoff."""
        self._pending_checks: list[_Check] = []
        self._workers: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ state access

    @property
    def backend(self) -> Invoker:
        """The backend (of either contract) as the engine calls it."""
        return self.calls.backend

    @backend.setter
    def backend(self, backend: AnyBackend | Invoker) -> None:
        self.calls.backend = backend

    @property
    def fail_closed(self) -> str:
        return self.mode.fail_closed

    def snapshot(self) -> Snapshot:
        """Every record as stored now (raises ``CheckpointCorruptError``)."""
        return self.store.snapshot()

    def known_claims(self) -> Mapping[str, ClaimRecord]:
        return self.store.snapshot().checkpoint.claims

    def enter_fail_closed(self, exc: errors.CheckpointCorruptError) -> None:
        """Stop trusting the store (found unusable while running); keep a copy."""
        if self.mode.fail_closed:
            return
        kept = self.store.keep_aside(exc.path)
        reason = f"{exc} (copy kept at {kept})" if kept else str(exc)
        self.mode = Mode(f"{reason}; {settle.lost_store_hint(len(self.specs.scan()))}")
        self.metrics.checkpoint_errors.labels("corrupt").inc()
        log.error("claim store unusable, failing closed: %s", self.mode.fail_closed)

    async def observe(self, uid: str) -> ClaimView:
        """One claim as it is now (call with its lock held). Never writes.

        A record that fails its checksum makes this claim alone fail closed; a store
        that cannot be read at all makes the whole node fail closed. Claims observed in
        the same turn of the event loop are read in one query, and their files looked up
        together.
        """
        record = None
        fail_closed = self.mode.fail_closed
        if not fail_closed:
            try:
                record, fail_closed = await self.store.record_now(uid)
            except errors.CheckpointCorruptError as exc:
                self.enter_fail_closed(exc)
                fail_closed = self.mode.fail_closed
        return self._view(uid, record, fail_closed, await self._artifacts_now(uid, record))

    async def _artifacts_now(self, uid: str, record: ClaimRecord | None) -> bool:
        """``artifacts_present``, checked with the other claims observed in the same turn:
        a few inline, many in one worker thread. An ``lstat`` on the event loop gives the
        GIL away and waits to take it back from the spec writer, which in a 1,000-claim
        call cost more than the lookups themselves."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        if not self._pending_checks:
            loop.call_soon(self._check_pending)
        self._pending_checks.append((uid, record, future))
        return await future

    def _check_pending(self) -> None:
        pending, self._pending_checks = self._pending_checks, []
        if len(pending) <= INLINE_CHECKS:
            _settle_checks(pending, self._check_all(pending))
            return
        self.work.spawn("file-checks", self._check_in_thread(pending))

    async def _check_in_thread(self, pending: Sequence[_Check]) -> None:
        try:
            answers = await asyncio.to_thread(self._check_all, pending)
        except BaseException as exc:  # cancelled, or no thread to run it: every claim gets it
            _settle_checks(pending, exc)
            raise
        _settle_checks(pending, answers)

    def _check_all(
        self, pending: Sequence[tuple[str, ClaimRecord | None, object]]
    ) -> list[bool | BaseException]:
        answers: list[bool | BaseException] = []
        for uid, record, _ in pending:
            try:
                answers.append(self.steps.artifacts_present(record, uid))
            except Exception as exc:  # noqa: BLE001 - that claim's observation fails
                answers.append(exc)
        return answers

    async def observe_group(self, uids: Sequence[str]) -> list[ClaimView | BaseException]:
        """``observe`` of several claims (their locks held): their records read in one
        query, their files checked together (a few inline, more in one worker thread);
        a view each, or the error of checking that claim's files."""
        found: Mapping[str, tuple[ClaimRecord | None, str]] = {}
        if not self.mode.fail_closed:
            try:
                found = self.store.records_now(uids)
            except errors.CheckpointCorruptError as exc:
                self.enter_fail_closed(exc)
        seen = [(uid, *found.get(uid, (None, self.mode.fail_closed))) for uid in uids]
        present = (
            self._check_all(seen)
            if len(seen) <= INLINE_CHECKS
            else await asyncio.to_thread(self._check_all, seen)
        )
        return [
            answer if isinstance(answer, BaseException) else self._view(uid, r, closed, answer)
            for (uid, r, closed), answer in zip(seen, present, strict=True)
        ]

    def observe_many(
        self, uids: Sequence[str], *, known: Snapshot | None = None
    ) -> list[ClaimView]:
        """``observe`` of several claims (their locks held), read in one query (rows
        unchanged since the snapshot ``known`` are not decoded again)."""
        found: Mapping[str, tuple[ClaimRecord | None, str]] = {}
        if not self.mode.fail_closed:
            try:
                found = self.store.records_now(uids, known=known)
            except errors.CheckpointCorruptError as exc:
                self.enter_fail_closed(exc)
        views = []
        for uid in uids:
            record, fail_closed = found.get(uid, (None, self.mode.fail_closed))
            present = self.steps.artifacts_present(record, uid)
            views.append(self._view(uid, record, fail_closed, present))
        return views

    def _view(
        self, uid: str, record: ClaimRecord | None, fail_closed: str, spec_present: bool
    ) -> ClaimView:
        return ClaimView(
            uid,
            record,
            spec_present=spec_present,
            boot_id=self.store.boot_id,
            fail_closed=fail_closed,
        )

    # ------------------------------------------------------------------ the RPC paths

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        """Prepare every claim; one outcome per claim UID, failures per claim."""
        return await self._run_call(_Call("prepare", refs, self._deadline()))

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; unknown claims succeed. Returns UID → error ('' = OK)."""
        outcomes = await self._run_call(_Call("unprepare", refs, self._deadline()))
        return {uid: outcome.error for uid, outcome in outcomes.items()}

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.call_budget

    async def _run_call(self, call: _Call) -> dict[str, PrepareOutcome]:
        """Run a call's claims on fairly shared slots; answer every claim by the deadline.

        The workers are engine-owned tasks: if the caller gives up, a claim already
        started still finishes and records its outcome (a later call waits on its lock);
        a claim not started yet is not started.
        """
        queue = list(reversed(call.refs))
        run = self._prepare_group if call.operation == "prepare" else self._unprepare_group
        if call.operation == "unprepare":
            call.all_answered = asyncio.get_running_loop().create_future()
        workers = [self.work.spawn(f"{call.operation}-worker", self._groups(call, queue, run))]
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
        call: _Call,
        queue: list[ClaimRef],
        run: Callable[[_Call, Sequence[ClaimRef], _Held], Awaitable[list[_Alone]]],
    ) -> None:
        """Run a call's claims in groups, each as many claims as it got slots for: one
        slot in the call's turn, and then every slot free at that moment. A claim going
        on alone (``_alone``) runs beside the call's next groups, on its own slot; the
        call ends when every group and every claim gone alone has ended."""
        alone: list[asyncio.Task[None]] = []
        while queue:
            held = _Held(self._slots, await self._slots.acquire_some(call, len(queue)))
            group = [queue.pop() for _ in range(min(held.count, len(queue)))]
            try:
                if not group or time.monotonic() >= call.deadline:
                    break
                held.give_back(held.count - len(group))
                for ref, delay in await run(call, group, held):
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

    async def _prepare_group(
        self, call: _Call, group: Sequence[ClaimRef], held: _Held
    ) -> list[_Alone]:
        """Claims without a record are prepared together (``prepare_fresh_many``); those
        prepared already are answered from their records."""

        def sort(view: ClaimView) -> _Sorted:
            actions = plan.plan_prepare(view)
            if actions == [plan.Action.PREPARE]:
                return _Route.TOGETHER
            if actions == [plan.Action.ANSWER_PREPARED]:
                return self._prepared_answer
            return _Route.ALONE

        async def run(
            together: Sequence[tuple[ClaimRef, ClaimView]], early: _Early
        ) -> Sequence[ClaimRecord | BaseException]:
            return await self.steps.prepare_fresh_many([ref for ref, _ in together], prepared=early)

        return await self._run_group(call, group, held, sort, run)

    async def _unprepare_group(
        self, call: _Call, group: Sequence[ClaimRef], held: _Held
    ) -> list[_Alone]:
        """Prepared claims are torn down together (``teardown_many``); claims without a
        record are answered at once (unprepare is idempotent)."""

        def sort(view: ClaimView) -> _Sorted:
            actions = plan.plan_unprepare(view)
            if not actions:
                return self._nothing_to_unprepare
            if actions == [plan.Action.UNPREPARE] and view.record is not None:
                return _Route.TOGETHER
            return _Route.ALONE

        async def run(
            together: Sequence[tuple[ClaimRef, ClaimView]], early: _Early
        ) -> Sequence[BaseException | None]:
            records = [view.record for _, view in together if view.record is not None]
            results = await self.steps.teardown_many(
                records, reason="unprepare", done=lambda index: early(index, None)
            )
            for (ref, _), result in zip(together, results, strict=True):
                if result is None:
                    self._stale_since.pop(ref.uid, None)
            return results

        return await self._run_group(call, group, held, sort, run)

    async def _run_group(
        self,
        call: _Call,
        group: Sequence[ClaimRef],
        held: _Held,
        sort: Callable[[ClaimView], _Sorted],
        run: Callable[
            [Sequence[tuple[ClaimRef, ClaimView]], _Early],
            Awaitable[Sequence[ClaimRecord | BaseException | None]],
        ],
    ) -> list[_Alone]:
        """A group of a call's claims: observed and sorted under their locks (``sort``:
        answered at once, done together by ``run``, or alone), each answered as soon as
        its result is known (giving back its slot); the claims that go on alone.

        A claim with interrupted work to finish first, a claim named twice, a prepare
        that failed temporarily (once its delay has passed), and every claim of a group
        whose locks or observation failed as a whole take the one-claim route, where
        observe → plan finishes whatever the group left half done.
        """
        started = time.perf_counter()
        answered: set[str] = set()  # (not call.outcomes: a UID may recur in a later group)

        def answer(ref: ClaimRef, how: Callable[[ClaimRef, _A], PrepareOutcome], given: _A) -> None:
            self._answered(call, ref, started, how, given)
            answered.add(ref.uid)
            held.give_back()

        def early(index: int, record: ClaimRecord | None) -> None:
            answer(together[index][0], _outcome_of, record)

        together: list[tuple[ClaimRef, ClaimView]] = []
        alone: list[_Alone] = []
        uids = [ref.uid for ref in group]
        if len(set(uids)) < len(uids):
            alone = [(ref, 0.0) for ref in group]
            group, uids = [], []
        results: Sequence[ClaimRecord | BaseException | None] = ()
        ran = False
        try:
            async with self.store.claim_locks(uids):
                views = await self.observe_group(uids)
                for ref, view in zip(group, views, strict=True):
                    if isinstance(view, BaseException):
                        answer(ref, _outcome_of, view)
                        continue
                    sorted_as = sort(view)
                    if sorted_as is _Route.TOGETHER:
                        together.append((ref, view))
                    elif sorted_as is _Route.ALONE:
                        alone.append((ref, 0.0))
                    else:
                        answer(ref, sorted_as, view)
                if together:
                    results = await run(together, early)
                ran = True
        except errors.IrreversibleError as exc:
            call.failed_irreversibly(exc)
            return alone
        except Exception:
            if ran:  # only giving back the locks failed: the results stand
                log.warning("could not give back a group's claim locks", exc_info=True)
            else:
                log.warning("a group of claims goes on one by one", exc_info=True)
                results, together = (), []
                alone = [(ref, 0.0) for ref in group if ref.uid not in answered]
        for (ref, _), result in zip(together, results, strict=True):
            if ref.uid in answered:
                continue  # answered as soon as it was done
            if isinstance(result, errors.IrreversibleError) or (
                isinstance(result, BaseException) and not isinstance(result, Exception)
            ):
                call.failed_irreversibly(result)
            elif (
                call.operation == "prepare"
                and isinstance(result, errors.TemporaryError)
                and time.monotonic() + result.delay < call.deadline
            ):
                log.info(
                    "prepare failed temporarily (%s); retrying in %g s",
                    result,
                    result.delay,
                    extra={"claim_uid": ref.uid},
                )
                alone.append((ref, result.delay))
            else:
                answer(ref, _outcome_of, result)
        return alone

    def _nothing_to_unprepare(self, ref: ClaimRef, _: ClaimView) -> PrepareOutcome:
        self._stale_since.pop(ref.uid, None)
        return PrepareOutcome()

    def _answered(
        self,
        call: _Call,
        ref: ClaimRef,
        started: float,
        answer: Callable[[ClaimRef, _A], PrepareOutcome],
        given: _A,
    ) -> None:
        """Record a group's claim's answer (the error taxonomy acted on) and its metric."""
        try:
            outcome = answer(ref, given)
        except Exception as exc:  # noqa: BLE001 - the claim's answer
            with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
                outcome = self._failure(call.operation, ref, exc)
        call.answered(ref.uid, outcome)
        result = "error" if outcome.error else "success"
        self.metrics.operation_done(call.operation, result, time.perf_counter() - started)

    async def _alone(self, call: _Call, ref: ClaimRef, delay: float) -> None:
        """One claim of a group on the one-claim route (after ``delay`` seconds), on the
        slot its group handed over."""
        try:
            if delay:
                await asyncio.sleep(delay)
            one = self._prepare_claim if call.operation == "prepare" else self._unprepare_claim
            call.answered(ref.uid, await self._timed(call.operation, ref, call.deadline, one))
        except errors.IrreversibleError as exc:
            call.failed_irreversibly(exc)
        finally:
            self._slots.release()

    async def _timed(
        self,
        operation: str,
        ref: ClaimRef,
        deadline: float,
        one: Callable[[ClaimRef, float], Awaitable[PrepareOutcome]],
    ) -> PrepareOutcome:
        # Every log line of this claim's work carries the claim (the RPC's request id is
        # already bound: tasks inherit the caller's context).
        with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
            return await self._answer(operation, ref, deadline, one)

    async def _answer(
        self,
        operation: str,
        ref: ClaimRef,
        deadline: float,
        one: Callable[[ClaimRef, float], Awaitable[PrepareOutcome]],
    ) -> PrepareOutcome:
        """The error taxonomy, acted on: temporary → retryable answer, claim/permanent →
        that claim's error, irreversible → up to the RPC (Internal), anything else → a
        per-claim error naming its type (a bug, logged with its traceback)."""
        started = time.perf_counter()
        result = "error"
        try:
            outcome = await one(ref, deadline)
            result = "success" if not outcome.error else "error"
            return outcome
        except (asyncio.CancelledError, errors.IrreversibleError):
            raise
        except Exception as exc:  # noqa: BLE001 - the claim's answer
            return self._failure(operation, ref, exc)
        finally:
            self.metrics.operation_done(operation, result, time.perf_counter() - started)

    @staticmethod
    def _failure(operation: str, ref: ClaimRef, exc: Exception) -> PrepareOutcome:
        """A claim's answer for the error its work failed with (never Irreversible)."""
        if isinstance(exc, errors.TemporaryError):
            return PrepareOutcome(error=f"{operation} failed temporarily: {exc}; retry")
        if isinstance(exc, errors.DraletError):
            message = str(exc)
            if not message.startswith(operation):  # say what failed once, never twice
                message = f"{operation} failed: {message}"
            log.warning("%s", message, extra={"claim_uid": ref.uid})
            return PrepareOutcome(error=str(exc))
        log.error(
            "%s failed unexpectedly",
            operation,
            exc_info=(type(exc), exc, exc.__traceback__),
            extra={"claim_uid": ref.uid},
        )
        return PrepareOutcome(error=f"{operation} failed: {type(exc).__name__}: {exc}")

    async def _prepare_claim(self, ref: ClaimRef, deadline: float) -> PrepareOutcome:
        """One claim's prepare; a ``TemporaryError`` is retried after its delay while the
        call's budget allows, then answered as retryable."""
        while True:
            try:
                async with self.store.claim_lock(ref.uid):
                    return await self._prepare_planned(ref)
            except errors.TemporaryError as exc:
                if time.monotonic() + exc.delay >= deadline:
                    raise
                log.info("prepare failed temporarily (%s); retrying in %g s", exc, exc.delay)
                await asyncio.sleep(exc.delay)

    async def _prepare_planned(self, ref: ClaimRef) -> PrepareOutcome:
        view = await self.observe(ref.uid)
        for action in plan.plan_prepare(view):
            if action is plan.Action.ANSWER_PREPARED:
                return self._prepared_answer(ref, view)
            if action is plan.Action.REFUSE:
                raise errors.ClaimError(ref.uid, f"not preparing new claims: {view.fail_closed}")
            if action is plan.Action.PREPARE:
                record = await self.steps.prepare_fresh(ref)
                return PrepareOutcome(devices=record.devices)
            await self.run_step(action, view, reason="retry after interrupted work")
        raise AssertionError("plan_prepare always ends in an answer")

    @staticmethod
    def _prepared_answer(ref: ClaimRef, view: ClaimView) -> PrepareOutcome:
        """A claim prepared already: its devices, if the kubelet names it as recorded."""
        record = view.record
        assert record is not None
        if (record.namespace, record.name) != (ref.namespace, ref.name):
            raise errors.ClaimError(
                ref.uid,
                f"claim UID {ref.uid} is prepared as {record.namespace}/{record.name}, "
                f"not {ref.namespace}/{ref.name}",
            )
        return PrepareOutcome(devices=record.devices)

    async def _unprepare_claim(self, ref: ClaimRef, deadline: float) -> PrepareOutcome:
        async with self.store.claim_lock(ref.uid):
            view = await self.observe(ref.uid)
            for action in plan.plan_unprepare(view):
                if action is plan.Action.UNPREPARE_FROM_PROOF:
                    await self.steps.unprepare_from_proof(ref)
                    if not self.mode.fail_closed:
                        await self.store.drop(ref.uid)  # this claim's unusable record
                else:
                    await self.run_step(action, view, reason="unprepare")
            self._stale_since.pop(ref.uid, None)
        return PrepareOutcome()

    async def run_step(self, action: plan.Action, view: ClaimView, *, reason: str) -> str:
        """Execute one planned step for a claim whose lock is held; returns the report
        action name ('' when there was nothing left to do)."""
        record = view.record
        if action is plan.Action.REMOVE_ORPHAN_SPEC:
            if record is not None:
                return ""
            removed = await self.steps.remove_orphan_artifacts(view.uid)
            if removed:
                self.metrics.recovery_actions.labels(removed).inc()
            return removed
        if record is None:
            return ""
        if action is plan.Action.REWRITE_SPEC:
            return "spec-rewritten" if await self.steps.rewrite_spec(record) else ""
        names = {
            plan.Action.ROLL_BACK: "prepare-rolled-back",
            plan.Action.FINISH_UNPREPARE: "unprepare-finished",
            plan.Action.RETRY_FINALIZER_REMOVAL: "finalizer-retried",
            plan.Action.UNPREPARE: "unprepared",
            plan.Action.UNPREPARE_STALE: "stale-claim-unprepared",
        }
        if action not in names:
            raise ValueError(f"{action} is not a per-claim step")
        await self.steps.teardown(record, reason=reason)
        return names[action]

    async def settled(self) -> None:
        """Wait for the work of the calls answered so far (an unprepare's owed finalizer
        removals) to end; raises what one of them died of (a failpoint's simulated
        crash after the answer)."""
        while self._workers:
            ended, _ = await asyncio.wait(set(self._workers))
            raise_failure(ended)

    async def close(self) -> None:
        """Finish the spec and record writes already handed off; close the store."""
        await asyncio.to_thread(self.steps.spec_io.stop)
        await self.store.close()

    # ------------------------------------------------------------------ node-wide work

    async def recover(self) -> settle.RecoveryReport:
        """Reconcile records, CDI directory and backend at start (``settle.recover``)."""
        return await settle.recover(self)

    async def collect_stale(self, *, now: float | None = None, force: bool = False) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone, replaced or no longer ours."""
        return await settle.collect_stale(self, now=now, force=force)

    async def fix(self, findings: Sequence[plan.Finding]) -> settle.RecoveryReport:
        """Execute the planned step of every finding (``dralet audit --fix``)."""
        return await settle.fix(self, findings)
