"""The prepare route: none → PrepareStarted → (finalizer added ∥ DevicePrepared…) →
SpecWritten → Completed, for claims without a record (each one's lock held by the
caller).

Each durable fact is made before the next step and followed by a failpoint, so the
crash suite can kill the driver there. The intent is written first: from then on any
failure or crash ends in a teardown (``teardown``) that removes whatever was done.

``Prepare`` is a little over 300 lines on purpose: its methods are the route's steps in
the order they run, read top to bottom as one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dralet import errors, failpoints
from dralet.cdi import store as cdi_store
from dralet.checkpoint.database import Drop
from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef, PartialPrepareError, PreparedDevice
from dralet.node.claims import devicemetadata, devicestatus, records, store
from dralet.node.claims.calls import BackendTimeoutError, Calls
from dralet.node.claims.group import (
    NOT_DONE,
    Route,
    RouteParts,
    all_of,
    backend_calls,
    bound,
    each,
    each_now,
    hit_after,
    only,
    survivors,
)
from dralet.node.claims.records import (
    FP_AFTER_BACKEND_PREPARE,
    FP_AFTER_FINALIZER,
    FP_AFTER_METADATA,
    FP_AFTER_SPEC,
    FP_AFTER_STARTED,
    now_stamp,
)
from dralet.node.claims.teardown import Teardown, apply_device_status
from dralet.node.settings import DriverSettings

__all__ = ["Prepare"]

log = logging.getLogger("dralet.node.claims")


@dataclass(eq=False)
class _Fresh:
    """One claim of a group on its way up: what the steps so far made of it."""

    index: int
    ref: ClaimRef
    claim: Mapping[str, Any]
    record: ClaimRecord
    results: tuple[PreparedDevice, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)
    stamp: cdi_store.SpecStamp | None = None


_Outcome = asyncio.Future[tuple[PreparedDevice, ...] | Exception]
"""The result of a backend prepare that outlasted its group's, once it returns."""
_Late = tuple[_Fresh, _Outcome]
"""A claim whose backend prepare outlasted its group's, with the future of its result."""


def _recorded(fresh: _Fresh, stored: ClaimRecord) -> None:
    fresh.record = stored


class Prepare(Route):
    """Prepares claims without a record, one or a group at a time; every method
    expects the claims' locks held."""

    def __init__(self, parts: RouteParts, *, teardown: Teardown) -> None:
        super().__init__(parts)
        self.teardown = teardown

    async def prepare_fresh(self, ref: ClaimRef) -> ClaimRecord:
        """One claim's prepare: ``prepare_fresh_many`` of that claim alone."""
        return only(await self.prepare_fresh_many([ref]))

    async def prepare_fresh_many(
        self,
        refs: Sequence[ClaimRef],
        *,
        prepared: Callable[[int, ClaimRecord], None] | None = None,
    ) -> list[ClaimRecord | BaseException]:
        """none → PrepareStarted → (finalizer ∥ DevicePrepared…) → SpecWritten → Completed,
        for claims without a record (each one's lock held), moving through each step
        together: their reads, finalizers and backend prepares run concurrently (each kind
        bounded by its limit), each durable step is one commit (or one group of spec
        writes) for all of them, and a failpoint is hit per claim after each step.

        A result per claim: its completed record or its error. A claim that fails at any
        step leaves the group at once and, once the others are done, is torn down on its
        own: one claim's failure never holds back or rolls back another's. ``prepared``
        hears of each claim prepared (its index in ``refs``) before those teardowns run.
        """
        out: list[ClaimRecord | BaseException] = [NOT_DONE] * len(refs)
        claims = await each(refs, self.calls.get_claim, limit=self.calls.api_limit)
        begun: list[_Fresh] = []
        for index, (ref, claim) in enumerate(zip(refs, claims, strict=True)):
            try:
                begun.append(_intended(self.settings, self.store.boot_id, index, ref, claim))
            except Exception as exc:  # noqa: BLE001 - this claim's own answer
                out[index] = exc
        failed: list[tuple[_Fresh, Exception]] = []
        live = await self._record_intents(begun, out)
        live, late, refused = await self._finalizers_beside_devices(live, failed)
        finishing = [self._finish(live, failed, out, prepared)]
        finishing += [self._finish_late(f, result, failed, out, prepared) for f, result in late]
        finishing += [_held_until_returned(f, result, failed) for f, result in refused]
        await all_of(finishing)
        # Every teardown at once: a group holds at most ``max_parallel_claims`` claims.
        undone = await each(failed, self._rolled_back, limit=max(1, len(failed)))
        for (fresh, _), error in zip(failed, undone, strict=True):
            out[fresh.index] = error
        return out

    async def _record_intents(
        self, begun: Sequence[_Fresh], out: list[ClaimRecord | BaseException]
    ) -> list[_Fresh]:
        """One commit of every claim's intent. A claim whose intent failed is answered
        (nothing of it happened, so nothing is torn down), and an intent that may have
        been written after all (EIO on the fsync) is taken back."""
        live: list[_Fresh] = []
        undo: list[str] = []
        stored_all = await self.store.intents([f.record for f in begun])
        for fresh, stored in zip(begun, stored_all, strict=True):
            if isinstance(stored, BaseException):
                out[fresh.index] = stored
                if not isinstance(stored, errors.ClaimError):
                    undo.append(fresh.ref.uid)
                continue
            try:
                failpoints.hit(FP_AFTER_STARTED)
            except Exception as exc:  # noqa: BLE001 - the next call or start rolls it back
                out[fresh.index] = exc
                continue
            live.append(fresh)
        if undo:
            try:
                taken_back = await self.store.commit([Drop(uid) for uid in undo])
            except Exception as exc:  # noqa: BLE001 - the records are rolled back later
                taken_back = [exc] * len(undo)
            for uid, error in zip(undo, taken_back, strict=True):
                if error is not None:
                    log.warning("could not take back a prepare intent", extra={"claim_uid": uid})
        return live

    async def _finalizers_beside_devices(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> tuple[list[_Fresh], list[_Late], list[_Late]]:
        """The finalizers added while the backend prepares the devices. Safe in either
        order or at once: the intent already records both as possibly done (the
        finalizer marked as added, and a prepare cut short asks the backend for its
        states), so a failure of either, or a crash anywhere, ends in the same teardown
        of both; and nothing is answered, nor any spec written, before both are done.
        The claims through both; those whose backend prepare is late; and those late
        whose finalizer was refused (torn down once their prepare returned)."""
        refused: list[tuple[_Fresh, Exception]] = []
        added: list[_Fresh] = []
        prepared: tuple[list[_Fresh], list[_Late]] = ([], [])

        async def finalizers() -> None:
            added[:] = await self._add_finalizers(live, refused)

        async def devices() -> None:
            nonlocal prepared
            prepared = await self._prepare_devices(live, failed)

        await all_of([finalizers(), devices()])
        on_time, late = prepared
        if not refused:
            return on_time, late, []
        failing = {id(f) for f, _ in failed}
        failed.extend(item for item in refused if id(item[0]) not in failing)
        kept = {id(f) for f in added}
        return (
            [f for f in on_time if id(f) in kept],
            [(f, result) for f, result in late if id(f) in kept],
            [(f, result) for f, result in late if id(f) not in kept],
        )

    async def _add_finalizers(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        async def add(fresh: _Fresh) -> bool:
            return await self.calls.add_finalizer(fresh.ref, current=fresh.claim)

        added = await each(live, add, limit=self.calls.api_limit)
        return survivors(live, added, failed, _finalizer_added)

    async def _finish(
        self,
        live: Sequence[_Fresh],
        failed: list[tuple[_Fresh, Exception]],
        out: list[ClaimRecord | BaseException],
        prepared: Callable[[int, ClaimRecord], None] | None,
    ) -> None:
        """The steps after the backend's: files, completion, device status; each claim
        that got through them answered."""
        live = await self._write_files(live, failed)
        live = await self._complete(live, failed)
        if self.settings.write_device_status:

            async def write_status(fresh: _Fresh) -> None:
                await _write_device_status(self.settings, self.calls, self.metrics, fresh)

            written = await each(live, write_status, limit=self.calls.api_limit)
            for fresh, problem in zip(live, written, strict=True):
                if problem is not None:  # advisory: the claim is prepared all the same
                    log.error(
                        "device status not written",
                        exc_info=(type(problem), problem, problem.__traceback__),
                        extra={"claim_uid": fresh.ref.uid},
                    )
        told = log.isEnabledFor(logging.INFO)  # no per-claim log work when it is off
        for fresh in live:
            out[fresh.index] = fresh.record
            if told:
                with bound(fresh.ref):
                    devices = [d.device for d in fresh.record.devices]
                    log.info("prepared", extra={"devices": devices})
            if prepared is not None:
                prepared(fresh.index, fresh.record)

    async def _finish_late(
        self,
        fresh: _Fresh,
        result: _Outcome,
        failed: list[tuple[_Fresh, Exception]],
        out: list[ClaimRecord | BaseException],
        prepared: Callable[[int, ClaimRecord], None] | None,
    ) -> None:
        """A claim whose backend prepare outlasted its group's: the rest of its way alone."""
        live = await self._backend_results([fresh], [await result], failed)
        await self._finish(live, failed, out, prepared)

    async def _prepare_devices(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> tuple[list[_Fresh], list[_Late]]:
        """The backend prepares; the claims through them, and those still preparing
        ``LATE_AFTER`` seconds after the others were done (each with its future)."""

        async def prepare(fresh: _Fresh) -> tuple[PreparedDevice, ...]:
            # The backend's own log lines name the claim they are about.
            with bound(fresh.ref):
                return await self.calls.prepare_claim(fresh.ref, fresh.record.devices)

        on_time, results, late = await backend_calls(
            live, prepare, "backend prepares", limit=self.calls.backend_limit
        )
        return await self._backend_results(on_time, results, failed), late

    async def _backend_results(
        self,
        live: Sequence[_Fresh],
        results: Sequence[tuple[PreparedDevice, ...] | Exception],
        failed: list[tuple[_Fresh, Exception]],
    ) -> list[_Fresh]:
        """The claims whose devices the backend prepared whole; the others to ``failed``
        (what a partial prepare did recorded first)."""
        partial: list[tuple[_Fresh, PartialPrepareError]] = []
        whole: list[tuple[_Fresh, tuple[PreparedDevice, ...] | Exception]] = []
        for fresh, result in zip(live, results, strict=True):
            if isinstance(result, PartialPrepareError):
                # In memory first: a failure to record them still rolls back with them.
                try:
                    fresh.record = records.with_states(fresh.record, result.prepared)
                except Exception as exc:  # noqa: BLE001 - this claim's own failure
                    failed.append((fresh, exc))
                    continue
                partial.append((fresh, result))
            else:
                whole.append((fresh, result))
        kept = survivors([f for f, _ in whole], [r for _, r in whole], failed, self._prepared)
        if partial:
            stored = await self.store.put_many([f.record for f, _ in partial])
            for (fresh, error), put in zip(partial, stored, strict=True):
                cause = error.cause if isinstance(error.cause, Exception) else error
                failed.append((fresh, put if isinstance(put, Exception) else cause))
        return kept

    def _prepared(self, fresh: _Fresh, results: tuple[PreparedDevice, ...]) -> None:
        fresh.record = records.with_states(fresh.record, results)
        fresh.results = results
        for device, result in zip(fresh.record.devices, results, strict=True):
            if any(e.is_empty() for e in (result.edits, *result.more_edits)):
                raise errors.ClaimError(
                    fresh.ref.uid,
                    f"backend returned no container edits for device {device.device}",
                )
            problem = store.external_id_problem(device.external_cdi_ids, self.settings.cdi_kind)
            if problem:
                raise errors.ClaimError(fresh.ref.uid, f"device {device.device}: {problem}")
        failpoints.hit(FP_AFTER_BACKEND_PREPARE)

    async def _write_files(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        """The claims' device metadata files, then the CDI specs that mount them (a
        container never sees a missing file), each group written by one thread."""
        if self.settings.device_metadata and live:
            live = survivors(live, list(live), failed, self._metadata_documents)
            written = await asyncio.to_thread(
                each_now, live, lambda f: self.metadata_files.write(f.ref.uid, f.metadata)
            )
            live = survivors(live, written, failed, hit_after(FP_AFTER_METADATA))
        live = survivors(live, list(live), failed, self._spec_document)
        stamps = await self.spec_io.write_many(
            [(f.ref.uid, f.document) for f in live], checked=True
        )
        return survivors(live, stamps, failed, _spec_written)

    def _metadata_documents(self, fresh: _Fresh, _: object) -> None:
        fresh.metadata = devicemetadata.documents(
            self.settings.driver_name,
            fresh.ref,
            fresh.record.devices,
            fresh.results,
            fresh.claim,
            versions=self.settings.device_metadata_versions,
        )

    def _spec_document(self, fresh: _Fresh, _: object) -> None:
        fresh.document = store.build_spec(
            self.settings,
            self.metadata_files,
            fresh.ref,
            fresh.record.devices,
            fresh.results,
            fresh.metadata,
            fresh.claim,
        )

    async def _complete(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        stored = await self.store.put_many(
            [
                records.moved(
                    f.record,
                    ClaimState.PREPARE_COMPLETED,
                    cdi_spec=f.document,
                    cdi_spec_stamp=f.stamp,
                    device_metadata=f.metadata,
                )
                for f in live
            ]
        )
        return survivors(live, stored, failed, _recorded)

    async def _rolled_back(self, failure: tuple[_Fresh, Exception]) -> BaseException:
        """Tear a claim down after its prepare failed; the error to answer it with.

        ``record`` holds every state the backend returned so far, recorded or not; a
        device without one never returned from ``prepare`` in this process, unless the
        call timed out: then what it did is unknown and its states are asked for.
        """
        fresh, exc = failure
        try:
            with bound(fresh.ref):
                await self.teardown.teardown(
                    fresh.record,
                    reason=f"prepare failed: {exc}",
                    in_process=not isinstance(exc, BackendTimeoutError),
                )
        except errors.GOES_UP:
            raise
        except Exception as undo:  # noqa: BLE001 - reported in the claim's answer
            return _failed(fresh.ref.uid, exc, undo)
        return _failed(fresh.ref.uid, exc, None)


async def _held_until_returned(
    fresh: _Fresh,
    result: _Outcome,
    failed: list[tuple[_Fresh, Exception]],
) -> None:
    """A late backend prepare of a claim torn down anyway: its states once it returned,
    for the teardown to release the devices with (after a timeout, what it did is
    unknown: the teardown asks the backend, as for any prepare that timed out)."""
    outcome = await result
    if isinstance(outcome, BackendTimeoutError):
        failed[:] = [(f, outcome if f is fresh else e) for f, e in failed]
    elif isinstance(outcome, PartialPrepareError):
        fresh.record = records.with_states(fresh.record, outcome.prepared)
    elif not isinstance(outcome, Exception):
        fresh.record = records.with_states(fresh.record, outcome)


def _finalizer_added(fresh: _Fresh, added: bool) -> None:
    if not added:
        raise errors.ClaimError(
            fresh.ref.uid,
            f"ResourceClaim {fresh.ref.namespace}/{fresh.ref.name} disappeared while preparing",
        )
    failpoints.hit(FP_AFTER_FINALIZER)


def _spec_written(fresh: _Fresh, stamp: cdi_store.SpecStamp) -> None:
    fresh.stamp = stamp
    failpoints.hit(FP_AFTER_SPEC)


def _failed(uid: str, exc: Exception, undo: Exception | None) -> BaseException:
    """The answer of a claim whose prepare failed with ``exc`` and whose rollback
    failed with ``undo`` (None: it was rolled back)."""
    if undo is not None:
        error = errors.ClaimError(
            uid,
            f"prepare failed: {exc}; its rollback could not finish ({undo}) and is "
            "finished by the next call or start",
        )
    elif isinstance(exc, errors.ClaimError | errors.TemporaryError):
        return exc
    else:
        error = errors.ClaimError(uid, f"prepare failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _intended(
    settings: DriverSettings,
    boot_id: str,
    index: int,
    ref: ClaimRef,
    claim: Mapping[str, Any] | Exception | None,
) -> _Fresh:
    """The claim's ``PrepareStarted`` record, from the claim as read."""
    if isinstance(claim, Exception):
        raise claim
    devices = records.claim_devices(claim, ref, settings)
    assert claim is not None
    if claim.get("metadata", {}).get("deletionTimestamp"):
        raise errors.ClaimError(
            ref.uid, f"ResourceClaim {ref.namespace}/{ref.name} is being deleted"
        )
    # Intent first: the record says the finalizer may be on the claim before it is
    # added, so any failure or crash from here on ends in a teardown that removes it.
    started = ClaimRecord(
        uid=ref.uid,
        namespace=ref.namespace,
        name=ref.name,
        state=ClaimState.PREPARE_STARTED,
        devices=devices,
        finalizer_added=True,
        boot_id=boot_id,
        updated_at=now_stamp(),
    )
    return _Fresh(index, ref, claim, started)


async def _write_device_status(
    settings: DriverSettings, calls: Calls, metrics: DriverMetrics, fresh: _Fresh
) -> None:
    """Best effort: the claim is prepared whatever becomes of its status."""
    driver = settings.driver_name
    ref = fresh.ref
    try:
        entries = devicestatus.entries(
            driver, fresh.record.devices, fresh.results, claim=fresh.claim
        )
    except devicestatus.DeviceStatusError as error:
        metrics.device_status_writes.labels(result="refused").inc()
        log.warning("device status not written: %s", error, extra={"claim_uid": ref.uid})
        return
    await apply_device_status(calls, metrics, ref, driver, entries)
