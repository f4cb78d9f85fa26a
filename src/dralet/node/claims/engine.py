"""The claim engine: the ONE owner of claim state on a node, and its RPC paths.

Every path is observe → plan → execute under the claim's lock, and every claim gets its
own answer: the error taxonomy (``dralet.errors``) is acted on here (``failure``), and
a temporary failure is retried by one rule (``retry_in``), for claims of a group and
claims alone. A call's claims run in groups (``group.Scheduler``); a group's fresh
claims are prepared together (``prepare.Prepare.prepare_fresh_many``) or torn down
together (``teardown.Teardown.teardown_many``). A claim with interrupted work to finish
first, or one that failed temporarily, goes on alone (``_one``). docs/how-it-works.md
names every file one prepare runs code in.

Recovery at start, stale-claim cleanup and ``dralet audit --fix`` (``nodewide``) plan
with the same ``plan`` rules and execute through the same routes.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from dralet import errors, logs
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import ClaimRecord
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef
from dralet.node.claims import nodewide, plan
from dralet.node.claims.findings import Finding
from dralet.node.claims.group import Alone, Call, Held, PrepareOutcome, Scheduler
from dralet.node.claims.parts import Parts
from dralet.node.claims.plan import ClaimView, Mode

__all__ = ["ClaimEngine", "Mode", "PrepareOutcome"]

log = logging.getLogger("dralet.node.claims")


class _Route(enum.Enum):
    """Where a claim of a group goes once observed (unless it is answered at once)."""

    TOGETHER = "together"
    ALONE = "alone"


_Sorted = _Route | Callable[[ClaimRef, ClaimView], PrepareOutcome]
_A = TypeVar("_A")
_Early = Callable[[int, ClaimRecord | None], None]
"""Told each claim of a group as soon as it is done (its index in the group): its
record when prepared, None when gone."""


def outcome_of(_: ClaimRef, result: ClaimRecord | BaseException | None) -> PrepareOutcome:
    """A grouped claim's answer: the devices it was prepared with (nothing for an
    unprepare), or its error raised."""
    if isinstance(result, BaseException):
        raise result
    return PrepareOutcome(devices=result.devices if result is not None else ())


def failure(operation: str, ref: ClaimRef, exc: Exception) -> PrepareOutcome:
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


def prepared(ref: ClaimRef, view: ClaimView) -> PrepareOutcome:
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


def retry_in(exc: Exception, deadline: float) -> float | None:
    """The seconds after which a prepare that failed with ``exc`` is tried again, or
    None: not a ``TemporaryError``, or its delay would pass the call's ``deadline``
    (monotonic seconds; it is then answered as retryable)."""
    if not isinstance(exc, errors.TemporaryError) or time.monotonic() + exc.delay >= deadline:
        return None
    log.info("prepare failed temporarily (%s); retrying in %g s", exc, exc.delay)
    return exc.delay


def retry_grouped(call: Call, ref: ClaimRef, result: object) -> float | None:
    """A grouped prepare's temporary failure: after how long it goes on alone."""
    if call.operation != "prepare" or not isinstance(result, Exception):
        return None
    with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
        return retry_in(result, call.deadline)


def answer_grouped(
    metrics: DriverMetrics,
    call: Call,
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
            outcome = failure(call.operation, ref, exc)
    call.answered(ref.uid, outcome)
    result = "error" if outcome.error else "success"
    metrics.operation_done(call.operation, result, time.perf_counter() - started)


async def answer_alone(
    metrics: DriverMetrics,
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
    except errors.GOES_UP:
        raise
    except Exception as exc:  # noqa: BLE001 - the claim's answer
        return failure(operation, ref, exc)
    finally:
        metrics.operation_done(operation, result, time.perf_counter() - started)


class ClaimEngine(Parts):
    """The engine's parts (``Parts``) and the RPC paths over them; node-wide work is
    ``nodewide``'s, on the same parts."""

    @functools.cached_property
    def scheduler(self) -> Scheduler:
        return Scheduler(self.settings, self.work, group=self._group, alone=self._one)

    def snapshot(self) -> Snapshot:
        """Every record as stored now (raises ``CheckpointCorruptError``)."""
        return self.store.snapshot()

    def known_claims(self) -> Mapping[str, ClaimRecord]:
        return self.store.snapshot().checkpoint.claims

    # ------------------------------------------------------------------ the RPC paths

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        """Prepare every claim; one outcome per claim UID, failures per claim."""
        return await self.scheduler.run(Call("prepare", refs, self._deadline()))

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; unknown claims succeed. Returns UID → error ('' = OK)."""
        outcomes = await self.scheduler.run(Call("unprepare", refs, self._deadline()))
        return {uid: outcome.error for uid, outcome in outcomes.items()}

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.call_budget

    async def _group(self, call: Call, group: Sequence[ClaimRef], held: Held) -> list[Alone]:
        run = self._prepare_group if call.operation == "prepare" else self._unprepare_group
        return await run(call, group, held)

    async def _one(self, call: Call, ref: ClaimRef) -> PrepareOutcome:
        one = self._prepare_claim if call.operation == "prepare" else self._unprepare_claim
        # Every log line of this claim's work carries the claim (the RPC's request id is
        # already bound: tasks inherit the caller's context).
        with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
            return await answer_alone(self.metrics, call.operation, ref, call.deadline, one)

    async def _prepare_group(
        self, call: Call, group: Sequence[ClaimRef], held: Held
    ) -> list[Alone]:
        """Claims without a record are prepared together (``prepare_fresh_many``); those
        prepared already are answered from their records."""

        def sort(view: ClaimView) -> _Sorted:
            actions = plan.plan_prepare(view)
            if actions == [plan.Action.PREPARE]:
                return _Route.TOGETHER
            if actions == [plan.Action.ANSWER_PREPARED]:
                return prepared
            return _Route.ALONE

        async def run(
            together: Sequence[tuple[ClaimRef, ClaimView]], early: _Early
        ) -> Sequence[ClaimRecord | BaseException]:
            return await self.prepares.prepare_fresh_many(
                [ref for ref, _ in together], prepared=early
            )

        return await self._run_group(call, group, held, sort, run)

    async def _unprepare_group(
        self, call: Call, group: Sequence[ClaimRef], held: Held
    ) -> list[Alone]:
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
            results = await self.teardowns.teardown_many(
                records,
                reason="unprepare",
                done=lambda index: early(index, None),
                owe=functools.partial(self.owed.owe, after=call.all_answered),
            )
            for (ref, _), result in zip(together, results, strict=True):
                if result is None:
                    self.stale_since.pop(ref.uid, None)
            return results

        return await self._run_group(call, group, held, sort, run)

    async def _run_group(
        self,
        call: Call,
        group: Sequence[ClaimRef],
        held: Held,
        sort: Callable[[ClaimView], _Sorted],
        run: Callable[
            [Sequence[tuple[ClaimRef, ClaimView]], _Early],
            Awaitable[Sequence[ClaimRecord | BaseException | None]],
        ],
    ) -> list[Alone]:
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
            answer_grouped(self.metrics, call, ref, started, how, given)
            answered.add(ref.uid)
            held.give_back()

        def early(index: int, record: ClaimRecord | None) -> None:
            answer(together[index][0], outcome_of, record)

        together: list[tuple[ClaimRef, ClaimView]] = []
        alone: list[Alone] = []
        uids = [ref.uid for ref in group]
        if len(set(uids)) < len(uids):
            alone = [(ref, 0.0) for ref in group]
            group, uids = [], []
        results: Sequence[ClaimRecord | BaseException | None] = ()
        ran = False
        try:
            async with self.store.claim_locks(uids):
                views = await self.observer.group(uids)
                for ref, view in zip(group, views, strict=True):
                    if isinstance(view, BaseException):
                        answer(ref, outcome_of, view)
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
            if isinstance(result, BaseException) and errors.goes_up(result):
                call.failed_irreversibly(result)
            elif (delay := retry_grouped(call, ref, result)) is not None:
                alone.append((ref, delay))
            else:
                answer(ref, outcome_of, result)
        return alone

    def _nothing_to_unprepare(self, ref: ClaimRef, _: ClaimView) -> PrepareOutcome:
        self.stale_since.pop(ref.uid, None)
        return PrepareOutcome()

    async def _prepare_claim(self, ref: ClaimRef, deadline: float) -> PrepareOutcome:
        """One claim's prepare; a ``TemporaryError`` is retried after its delay while the
        call's budget allows, then answered as retryable."""
        while True:
            try:
                async with self.store.claim_lock(ref.uid):
                    return await self._prepare_planned(ref)
            except errors.TemporaryError as exc:
                delay = retry_in(exc, deadline)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def _prepare_planned(self, ref: ClaimRef) -> PrepareOutcome:
        view = await self.observer.one(ref.uid)
        for action in plan.plan_prepare(view):
            if action is plan.Action.ANSWER_PREPARED:
                return prepared(ref, view)
            if action is plan.Action.REFUSE:
                raise errors.ClaimError(ref.uid, f"not preparing new claims: {view.fail_closed}")
            if action is plan.Action.PREPARE:
                record = await self.prepares.prepare_fresh(ref)
                return PrepareOutcome(devices=record.devices)
            await self.repairs.run_step(action, view, reason="retry after interrupted work")
        raise AssertionError("plan_prepare always ends in an answer")

    async def _unprepare_claim(self, ref: ClaimRef, deadline: float) -> PrepareOutcome:
        async with self.store.claim_lock(ref.uid):
            view = await self.observer.one(ref.uid)
            for action in plan.plan_unprepare(view):
                if action is plan.Action.UNPREPARE_FROM_PROOF:
                    await self.teardowns.unprepare_from_proof(ref)
                    if not self.mode.fail_closed:
                        await self.store.drop(ref.uid)  # this claim's unusable record
                else:
                    await self.repairs.run_step(action, view, reason="unprepare")
            self.stale_since.pop(ref.uid, None)
        return PrepareOutcome()

    async def settled(self) -> None:
        """Wait for the work of the calls answered so far (an unprepare's owed finalizer
        removals) to end; raises what one of them died of (a failpoint's simulated
        crash after the answer)."""
        await self.scheduler.settled()
        await self.owed.drained()

    async def close(self) -> None:
        """Finish the spec and record writes already handed off; close the store."""
        await asyncio.to_thread(self.spec_io.stop)
        await self.store.close()

    # ------------------------------------------------------------------ node-wide work

    async def recover(self) -> nodewide.RecoveryReport:
        """Reconcile records, CDI directory and backend at start (``nodewide.recover``)."""
        return await nodewide.recover(self)

    async def collect_stale(self, *, now: float | None = None, force: bool = False) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone, replaced or no longer ours."""
        return await nodewide.collect_stale(self, now=now, force=force)

    async def fix(self, findings: Sequence[Finding]) -> nodewide.RecoveryReport:
        """Execute the planned step of every finding (``dralet audit --fix``)."""
        return await nodewide.fix(self, findings)

    async def accept_lost_store(self) -> nodewide.RecoveryReport:
        """The operator's word that the records are lost for good (``nodewide``)."""
        return await nodewide.accept_lost_store(self)
