"""Every way a claim goes down: unprepare, rollback of a failed or interrupted prepare,
stale-claim cleanup, recovery; the claim's lock is held by the caller.

PrepareStarted/Completed → UnprepareStarted → SpecRemoved → DevicesReleased →
(Released while the finalizer stays) → gone. Each durable fact is made before the
next step and followed by a failpoint, so the crash suite can kill the driver there.
``release_claim`` gets exactly the states ``prepare_claim`` returned and the same
configs back (recorded with the claim's spec in its completion write); a teardown of
a prepare a crash cut short asks the backend for them again (``prepare_claim`` is
idempotent by contract).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dralet import errors, failpoints
from dralet.checkpoint.database import Drop
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord, evolve
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef, PartialPrepareError, PreparedDevice
from dralet.node.claims import group, plan, records
from dralet.node.claims.calls import Calls
from dralet.node.claims.records import (
    FP_AFTER_FINALIZER_REMOVED,
    FP_AFTER_RELEASE,
    FP_AFTER_UNPREPARE_STARTED,
    FP_ANSWERED_FINALIZER_OWED,
)
from dralet.node.settings import DriverSettings
from dralet.tasks import TaskSet, raise_failure

__all__ = ["OwedRemovals", "Teardown", "apply_device_status"]

log = logging.getLogger("dralet.node.claims")


@dataclass(eq=False)
class _Down:
    """One claim of a group on its way down."""

    index: int
    record: ClaimRecord
    stopped: bool = False
    """It goes no further in this teardown (failed, or waits for its finalizer)."""
    answered: bool = False
    """Recorded Released before this teardown: answered as unprepared already."""


def _unprepare_started(item: _Down, stored: ClaimRecord) -> None:
    item.record = stored
    failpoints.hit(FP_AFTER_UNPREPARE_STARTED)


def _released(item: _Down, stored: ClaimRecord) -> None:
    item.record = stored


def _going(down: Sequence[_Down], failed: Sequence[tuple[_Down, Exception]]) -> list[_Down]:
    """The claims of ``down`` that neither failed nor stopped."""
    out = {id(item) for item, _ in failed}
    return [d for d in down if not d.stopped and id(d) not in out]


class Teardown(group.Route):
    """Takes claims down, one or a group at a time; every method expects the claims'
    locks held."""

    async def teardown(self, record: ClaimRecord, *, reason: str, in_process: bool = False) -> None:
        """``teardown_many`` of one claim; raises the error it failed with."""
        (error,) = await self.teardown_many([record], reason=reason, in_process=in_process)
        if error is not None:
            raise error

    async def teardown_many(
        self,
        records: Sequence[ClaimRecord],
        *,
        reason: str | Sequence[str],
        in_process: bool = False,
        done: Callable[[int], None] | None = None,
        owe: Callable[[Sequence[ClaimRecord]], None] | None = None,
    ) -> list[BaseException | None]:
        """Undo whatever each record says may have happened; each ends with its record
        gone. The claims (each one's lock held) go down each step together: one commit
        for all their UnprepareStarted, their specs removed as one group, their devices
        released and finalizers removed concurrently (bounded), one commit removing all
        their records. An error per claim (None: done); a claim that fails at a step
        stops there alone, its record left for the next call or start, and one whose
        release outlasts the others' by ``LATE_AFTER`` finishes alone. ``reason``: why,
        for the log (one for all, or one per record); ``done`` hears of each claim gone
        (its index in ``records``) as soon as it is.

        PrepareStarted/Completed → UnprepareStarted → SpecRemoved → DevicesReleased →
        (Released while the finalizer stays) → gone. A rollback of a prepare that never
        completed goes on even when its UnprepareStarted cannot be written (disk full):
        the PrepareStarted record on disk already says "roll back", so the spec and the
        devices go now and whatever record remains is finished by the next call or start.
        """
        reasons = [reason] * len(records) if isinstance(reason, str) else list(reason)
        down = [
            _Down(index, record, answered=record.state == ClaimState.RELEASED)
            for index, record in enumerate(records)
        ]
        failed: list[tuple[_Down, Exception]] = []
        results: list[BaseException | None] = [None] * len(records)
        down = await self._start_unprepare(down, failed)
        down, late = await self._remove_and_release(down, failed, in_process=in_process)
        # With a claim left late the group's locks stay held until it is done: its
        # claims' removals are not handed over to wait for those locks, but done here.
        owe = owe if not late else None
        finishing = [self._finish_down(down, failed, results, reasons, done, owe)]
        finishing += [
            self._finish_down_late(item, released, failed, results, reasons, done)
            for item, released in late
        ]
        await group.all_of(finishing)
        for item, exc in failed:
            results[item.index] = exc
        return results

    async def _finish_down(
        self,
        down: Sequence[_Down],
        failed: list[tuple[_Down, Exception]],
        results: list[BaseException | None],
        reasons: Sequence[str],
        done: Callable[[int], None] | None,
        owe: Callable[[Sequence[ClaimRecord]], None] | None = None,
    ) -> None:
        """The steps after the releases: finalizers, then one commit removing records.
        With ``done`` (a caller that answers each claim as soon as it can: the kubelet's
        unprepare), the claims holding a finalizer are answered once their Released
        record is durable, and the removal, owed from then on, follows the answer: here,
        or handed to ``owe`` (``OwedRemovals.owe``), which does it in a task of its own."""
        owed = await self._answer_owing(down, failed, reasons, done) if done else set()
        if owe is not None and owed:
            handed = [d for d in _going(down, failed) if d.index in owed]
            owe([d.record for d in handed])
            down = [d for d in down if d.index not in owed]
        gone = await self._remove_finalizers(down, failed)
        if not gone:
            return
        dropped: Sequence[BaseException | None]
        try:
            dropped = await self.store.commit([Drop(d.record.uid) for d in gone])
        except Exception as unwritten:  # noqa: BLE001 - the writer failed every removal
            dropped = [unwritten] * len(gone)
        for item, error in zip(gone, dropped, strict=True):
            if item.index in owed:
                continue  # answered already; a record not dropped is dropped next pass
            results[item.index] = error
            if error is None:
                # A claim Released already was answered as unprepared when it was recorded.
                if log.isEnabledFor(logging.INFO):  # no per-claim log work when it is off
                    what = "finalizer removed" if item.answered else "unprepared"
                    with group.bound(group.ref_of(item.record)):
                        log.info("%s (%s)", what, reasons[item.index])
                if done is not None:
                    done(item.index)

    async def _answer_owing(
        self,
        down: Sequence[_Down],
        failed: list[tuple[_Down, Exception]],
        reasons: Sequence[str],
        done: Callable[[int], None],
    ) -> set[int]:
        """Record Released for the claims that hold a finalizer (one commit) and answer
        them: their spec is gone and their devices released, so the kubelet need not wait
        on the API. The record is what makes the removal owed: a restart or the next
        cleanup pass retries it (``plan_repair``: Released → remove the finalizer)."""
        holding = [d for d in down if d.record.finalizer_added]
        if not holding:
            return set()
        owing = [d for d in holding if d.record.state == ClaimState.RELEASED]
        writing = [d for d in holding if d.record.state != ClaimState.RELEASED]
        if writing:
            stored = await self.store.put_many(
                [records.moved(d.record, ClaimState.RELEASED) for d in writing]
            )
            owing += group.survivors(writing, stored, failed, _released)
        told = log.isEnabledFor(logging.INFO)  # no per-claim log work when it is off
        for item in owing:
            if told:
                with group.bound(group.ref_of(item.record)):
                    log.info("unprepared (%s); finalizer removal owed", reasons[item.index])
            done(item.index)
        group.survivors(owing, owing, failed, group.hit_after(FP_ANSWERED_FINALIZER_OWED))
        return {item.index for item in owing}

    async def _finish_down_late(
        self,
        item: _Down,
        released: asyncio.Future[Exception | None],
        failed: list[tuple[_Down, Exception]],
        results: list[BaseException | None],
        reasons: Sequence[str],
        done: Callable[[int], None] | None,
    ) -> None:
        """A claim whose release outlasted its group's: the rest of its way alone."""
        group.survivors([item], [await released], failed, group.hit_after(FP_AFTER_RELEASE))
        await self._finish_down(_going([item], failed), failed, results, reasons, done)

    async def _start_unprepare(
        self, down: Sequence[_Down], failed: list[tuple[_Down, Exception]]
    ) -> list[_Down]:
        starting = [
            d
            for d in down
            if d.record.state in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED)
        ]
        if not starting:
            return list(down)
        stored = await self.store.put_many(
            [records.moved(d.record, ClaimState.UNPREPARE_STARTED) for d in starting]
        )
        outcomes: list[ClaimRecord | BaseException] = []
        for item, result in zip(starting, stored, strict=True):
            if isinstance(result, OSError) and item.record.state == ClaimState.PREPARE_STARTED:
                with group.bound(group.ref_of(item.record)):
                    log.warning(
                        "rolling back without a durable UnprepareStarted",
                        exc_info=(type(result), result, result.__traceback__),
                    )
                result = records.moved(item.record, ClaimState.UNPREPARE_STARTED)
            outcomes.append(result)
        group.survivors(starting, outcomes, failed, _unprepare_started)
        return _going(down, failed)

    async def _remove_and_release(
        self, down: Sequence[_Down], failed: list[tuple[_Down, Exception]], *, in_process: bool
    ) -> tuple[list[_Down], list[tuple[_Down, asyncio.Future[Exception | None]]]]:
        """Specs (and metadata files) first, then the devices: no container may start
        with a device being released. The claims through; those still releasing
        ``LATE_AFTER`` seconds after the others were done, each with its future."""
        going = [d for d in down if d.record.state == ClaimState.UNPREPARE_STARTED]
        if not going:
            return list(down), []
        removed = await self.spec_io.remove_many([d.record.uid for d in going])
        going = group.survivors(going, removed, failed, group.ignore)
        with_metadata = (
            [d for d in going if self.metadata_files.has_any(d.record.uid)]
            if plan.metadata_on_node(self.metadata_files)
            else []
        )
        if with_metadata:
            gone = await asyncio.to_thread(
                group.each_now, with_metadata, lambda d: self.metadata_files.remove(d.record.uid)
            )
            group.survivors(with_metadata, gone, failed, group.ignore)
            going = _going(going, failed)

        async def release(item: _Down) -> None:
            with group.bound(group.ref_of(item.record)):
                if not in_process and item.record.cdi_spec is None:
                    item.record = await self._recover_states(group.ref_of(item.record), item.record)
                await self._release(item.record)

        on_time, released, late = await group.backend_calls(
            going, release, "releases", limit=self.calls.backend_limit
        )
        group.survivors(on_time, released, failed, group.hit_after(FP_AFTER_RELEASE))
        later = {id(item) for item, _ in late}
        return [d for d in _going(down, failed) if id(d) not in later], late

    async def _remove_finalizers(
        self, down: Sequence[_Down], failed: list[tuple[_Down, Exception]]
    ) -> list[_Down]:
        """The finalizers of the claims that have one; the claims whose records may go.
        A finalizer that cannot be removed yet leaves its claim Released while the
        removal is retried: not a failure, but its record stays."""
        holding = [d for d in down if d.record.finalizer_added]
        if not holding:
            return list(down)
        if self.settings.write_device_status:

            async def clear_status(item: _Down) -> None:
                await apply_device_status(
                    self.calls,
                    self.metrics,
                    group.ref_of(item.record),
                    self.settings.driver_name,
                    [],
                )

            await group.each(holding, clear_status, limit=self.calls.api_limit)

        async def remove(item: _Down) -> bool:
            return await self.calls.remove_finalizer(group.ref_of(item.record))

        removed = await group.each(holding, remove, limit=self.calls.api_limit)
        kept: list[_Down] = []
        for item, result in zip(holding, removed, strict=True):
            if isinstance(result, Exception):
                # Any API failure only delays the removal.
                log.warning(
                    "could not remove finalizer yet (%s); will retry",
                    result,
                    extra={"claim_uid": item.record.uid},
                )
            if not isinstance(result, Exception) and result:
                continue
            item.stopped = True
            if item.record.state != ClaimState.RELEASED:
                kept.append(item)
        if kept:
            stored = await self.store.put_many(
                [records.moved(d.record, ClaimState.RELEASED) for d in kept]
            )
            group.survivors(kept, stored, failed, group.ignore)
        removed_now = [d for d in holding if not d.stopped]
        group.survivors(
            removed_now, removed_now, failed, group.hit_after(FP_AFTER_FINALIZER_REMOVED)
        )
        return _going(down, failed)

    async def _release(self, record: ClaimRecord) -> None:
        try:
            await self.calls.release_claim(group.ref_of(record), record.devices)
        except errors.GOES_UP:
            raise
        except Exception as exc:
            devices = ", ".join(d.device for d in record.devices)
            raise errors.ClaimError(
                record.uid, f"releasing devices {devices} failed: {exc}; will retry"
            ) from exc

    async def _recover_states(self, ref: ClaimRef, record: ClaimRecord) -> ClaimRecord:
        """A crash (or a failed write) came between ``prepare_claim`` returning and its
        states being recorded: ask again. ``prepare_claim`` is idempotent by contract, so
        held devices answer with the states they hold; devices it cannot prepare are not
        held."""
        if all(d.prepared for d in record.devices):
            return record
        recovered = await _recover_device_states(self.calls, ref, record.devices)
        return evolve(record, devices=recovered)

    async def unprepare_from_proof(self, ref: ClaimRef) -> None:
        """Fail-closed unprepare: the CDI dir and the backend prove what was prepared.

        Without a trusted record, each held device's state is asked of the backend again
        (``prepare`` is idempotent by contract) with the allocation and config the API
        still has, so ``release`` gets what it handed out. The kubelet's request names the
        claim, so its finalizer goes too once nothing is held any more; otherwise the
        ResourceClaim could never be deleted.
        """
        await self.spec_io.remove(ref.uid)
        in_use = await self.calls.backend.devices_in_use()
        held = sorted(device for device, holders in in_use.items() if ref.uid in holders)
        known = {d.device: d for d in await _allocation_if_known(self.settings, self.calls, ref)}
        recorded = [known[device] for device in held if device in known]
        for device in held:
            if device not in known:
                await self.calls.release_unrecorded(ref, self.settings.pool_name, device)
        if recorded:
            await self.calls.release_claim(
                ref, await _recover_device_states(self.calls, ref, recorded)
            )
        if not await self.calls.remove_finalizer(ref):
            raise errors.ClaimError(ref.uid, "could not remove the claim's finalizer; will retry")


async def _recover_device_states(
    calls: Calls, ref: ClaimRef, devices: Sequence[DeviceRecord]
) -> tuple[DeviceRecord, ...]:
    try:
        results: Sequence[PreparedDevice | None] = await calls.prepare_claim(ref, devices)
    except errors.GOES_UP:
        raise
    except PartialPrepareError as partial:
        results = partial.prepared
    except Exception:  # noqa: BLE001 - devices that cannot be prepared are not held
        return tuple(devices)
    return tuple(
        d if d.prepared or r is None else d.with_prepared_state(r.state)
        for d, r in zip(devices, results, strict=True)
    )


async def _allocation_if_known(
    settings: DriverSettings, calls: Calls, ref: ClaimRef
) -> tuple[DeviceRecord, ...]:
    try:
        claim = await calls.get_claim(ref)
        return records.claim_devices(claim, ref, settings, require_reserved=False)
    except errors.GOES_UP:
        raise
    except Exception:  # noqa: BLE001 - gone, unreachable or unreadable: release without a state
        return ()


async def apply_device_status(
    calls: Calls,
    metrics: DriverMetrics,
    ref: ClaimRef,
    driver: str,
    entries: list[dict[str, Any]],
) -> None:
    """This driver's device status entries of the claim (``[]`` removes them); best
    effort: status is advisory, the claim goes on whatever becomes of it."""
    try:
        await calls.apply_device_status(ref, driver, entries)
    except errors.GOES_UP:
        raise
    except Exception as exc:  # noqa: BLE001 - status is advisory; the claim goes on
        metrics.device_status_writes.labels(result="failed").inc()
        log.warning(
            "could not %s device status: %s",
            "write" if entries else "remove",
            exc,
            extra={"claim_uid": ref.uid},
        )
        return
    metrics.device_status_writes.labels(result="ok").inc()


class OwedRemovals:
    """The finalizer removals unprepares owe once answered (their claims recorded
    Released), done in a task of their own so that no group of a call waits on the API
    for them: a batch at a time (up to ``max_parallel_claims`` claims), under the
    batch's claim locks, through ``Teardown.teardown_many`` (concurrent patches, one
    commit dropping the records). A removal that fails leaves its claim Released: the
    stale-claim loop and the next start retry it (``plan_repair``), and the gauge
    ``dralet_finalizer_removals_owed`` counts it until then."""

    def __init__(self, teardown: Teardown, work: TaskSet) -> None:
        self._teardown = teardown
        self._work = work
        self._owed: dict[str, None] = {}
        """The UIDs owed, in the order they were answered (a dict as an ordered set)."""
        self._task: asyncio.Task[None] | None = None

    def owe(
        self, records: Sequence[ClaimRecord], *, after: asyncio.Future[None] | None = None
    ) -> None:
        """Owe the removals of these claims' finalizers (call with their locks held),
        begun once ``after`` is done: the kubelet's call that owes them is answered, so
        that the removals of a call's first claims do not take the CPU its later claims'
        answers need."""
        self._owed.update(dict.fromkeys(r.uid for r in records))
        if after is not None and not after.done():
            after.add_done_callback(lambda _: self._start())
        else:
            self._start()

    def _start(self) -> None:
        if self._owed and (self._task is None or self._task.done()):
            self._task = self._work.spawn("finalizer-removals", self._drain())

    async def drained(self) -> None:
        """Wait until every removal owed so far was tried; raises what the task died of
        (a failpoint's simulated crash)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])
        if self._task is not None:
            raise_failure([self._task])

    async def _drain(self) -> None:
        store = self._teardown.store
        size = max(1, self._teardown.settings.max_parallel_claims)
        while self._owed:
            uids = list(itertools.islice(self._owed, size))
            for uid in uids:
                del self._owed[uid]
            try:
                async with store.claim_locks(uids):
                    # Read again under the locks: another call may have moved a claim on.
                    found = store.records_now(uids)
                    owed = [
                        record
                        for record, _ in found.values()
                        if record is not None and record.state == ClaimState.RELEASED
                    ]
                    if owed:
                        await self._teardown.teardown_many(owed, reason="finalizer removal owed")
            except errors.GOES_UP:
                raise
            except Exception:
                log.warning("owed finalizer removals left for the next pass", exc_info=True)
