"""The steps of the claim lifecycle, executed under the claim's lock (the caller holds it).

Each step walks the transitions of ``states`` in order, makes each durable fact before
the next, and hits a failpoint after it so the crash suite can kill the driver there.
``prepare_fresh`` is the prepare route; ``teardown`` is every way down (unprepare,
rollback of a failed or interrupted prepare, stale-claim cleanup, recovery).
``release_claim`` gets exactly the states ``backend.prepare_claim`` returned and the
same configs back: they are recorded with the claim's spec in its completion write; a
prepare that fails before it rolls back with them from memory, and one a crash cut
short asks the backend for them again (``prepare_claim`` is idempotent by contract).

Longer than most modules because every durable step of the lifecycle lives here, in
order, so the whole route of a claim reads top to bottom in one file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dralet import errors, failpoints, logs
from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.cdi import store as cdi_store
from dralet.checkpoint.database import Drop, Stamp
from dralet.checkpoint.model import CONFIGS_KEY, ClaimRecord, ClaimState, DeviceRecord, evolve
from dralet.metrics import DriverMetrics
from dralet.node.backend import (
    AllocatedDevice,
    ClaimRef,
    ClaimUID,
    DeviceConfig,
    PartialPrepareError,
    PreparedDevice,
)
from dralet.node.claims import devicemetadata, devicestatus, source
from dralet.node.claims.calls import Calls, allocated, each, each_until_late, result_fields
from dralet.node.claims.specio import SpecWriter
from dralet.node.claims.store import RecordStore, now_stamp
from dralet.node.invoke import BackendTimeoutError
from dralet.node.settings import DriverSettings

__all__ = ["Steps"]

log = logging.getLogger("dralet.node.claims")

FP_AFTER_STARTED = "ledger.prepare.after-started"
FP_AFTER_FINALIZER = "ledger.prepare.after-finalizer"
FP_AFTER_BACKEND_PREPARE = "ledger.prepare.after-backend"
FP_AFTER_METADATA = "ledger.prepare.after-metadata"
FP_AFTER_SPEC = "ledger.prepare.after-spec"
FP_AFTER_UNPREPARE_STARTED = "ledger.unprepare.after-started"
FP_AFTER_RELEASE = "ledger.unprepare.after-release"
FP_AFTER_FINALIZER_REMOVED = "ledger.unprepare.after-finalizer"
FP_ANSWERED_FINALIZER_OWED = "ledger.unprepare.answered-finalizer-owed"
failpoints.declare(
    FP_AFTER_STARTED,
    FP_AFTER_FINALIZER,
    FP_AFTER_BACKEND_PREPARE,
    FP_AFTER_METADATA,
    FP_AFTER_SPEC,
    FP_AFTER_UNPREPARE_STARTED,
    FP_AFTER_RELEASE,
    FP_AFTER_FINALIZER_REMOVED,
    FP_ANSWERED_FINALIZER_OWED,
)


def ref_of(record: ClaimRecord) -> ClaimRef:
    return ClaimRef(ClaimUID(record.uid), record.namespace, record.name)


def _cdi_device_name(uid: str, device: DeviceRecord | AllocatedDevice) -> str:
    suffix = f"-{device.share_id}" if device.share_id else ""
    return f"{uid}-{device.device}{suffix}"


def _places(mine: Sequence[DeviceConfig], claims: Sequence[DeviceConfig]) -> list[int]:
    """Where each of a device's configs stands among all of the claim's (a device's
    configs are the claim's in the same order, less those for other requests)."""
    places: list[int] = []
    at = 0
    for config in mine:
        while at < len(claims) and claims[at] != config:
            at += 1
        places.append(at if at < len(claims) else len(claims) + len(places))
        at += 1
    return places


def _stored_config(config: DeviceConfig, order: int) -> dict[str, Any]:
    return {
        "source": config.source,
        "requests": list(config.requests),
        "parameters": dict(config.parameters),
        "order": order,
    }


def _cdi_names(base: str, more: int) -> list[str]:
    """A device's CDI device names: its own, then one per further CDI device."""
    return [base, *(f"{base}-{n}" for n in range(1, more + 1))]


def _cdi_ids(device: DeviceRecord, more: int) -> tuple[str, ...]:
    """``device``'s fully qualified CDI ids with ``more`` further CDI devices."""
    kind, _, base = device.cdi_device_ids[0].partition("=")
    return tuple(f"{kind}={name}" for name in _cdi_names(base, more))


@dataclass(eq=False)
class _Down:
    """One claim of a group on its way down."""

    index: int
    record: ClaimRecord
    stopped: bool = False
    """It goes no further in this teardown (failed, or waits for its finalizer)."""


def _unprepare_started(item: _Down, stored: ClaimRecord) -> None:
    item.record = stored
    failpoints.hit(FP_AFTER_UNPREPARE_STARTED)


def _released(item: _Down, stored: ClaimRecord) -> None:
    item.record = stored


def _ignore(item: object, result: object) -> None:
    """A step whose result needs nothing more (its error, if any, fails the claim)."""


def _going(down: Sequence[_Down], failed: Sequence[tuple[_Down, Exception]]) -> list[_Down]:
    """The claims of ``down`` that neither failed nor stopped."""
    out = {id(item) for item, _ in failed}
    return [d for d in down if not d.stopped and id(d) not in out]


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


_NOT_DONE = AssertionError("claim left without an answer")
LATE_AFTER = 1.0
"""Seconds a claim's backend prepare or release may run on after the rest of its
group's are done before the group goes on without it (the claim then finishes alone):
a device that hangs until ``backend_call_timeout`` holds back neither its group nor,
through the group's slots, other calls."""
_T = TypeVar("_T")
_I = TypeVar("_I")


def _survivors(
    live: Sequence[_I],
    results: Sequence[_T | BaseException],
    failed: list[tuple[_I, Exception]],
    step: Callable[[_I, _T], None],
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


async def _all_of(work: Sequence[Coroutine[Any, Any, None]]) -> None:
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


def _bound(ref: ClaimRef) -> contextlib.AbstractContextManager[None]:
    return logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}")


def _recorded(fresh: _Fresh, stored: ClaimRecord) -> None:
    fresh.record = stored


def _hit(point: str) -> Callable[[object, object], None]:
    def step(item: object, _: object) -> None:
        failpoints.hit(point)

    return step


class Steps:
    """What the engine does to one claim; every method expects the claim lock held."""

    def __init__(
        self,
        settings: DriverSettings,
        *,
        store: RecordStore,
        specs: cdi_store.SpecStore,
        calls: Calls,
        metrics: DriverMetrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.specs = specs
        self.spec_io = SpecWriter(specs)
        self.metadata_files = devicemetadata.MetadataFiles(settings.plugin_dir)
        self.calls = calls
        self.metrics = metrics

    # ------------------------------------------------------------------ prepare

    async def prepare_fresh(self, ref: ClaimRef) -> ClaimRecord:
        """One claim's prepare: ``prepare_fresh_many`` of that claim alone."""
        (result,) = await self.prepare_fresh_many([ref])
        if isinstance(result, BaseException):
            raise result
        return result

    async def prepare_fresh_many(
        self,
        refs: Sequence[ClaimRef],
        *,
        prepared: Callable[[int, ClaimRecord], None] | None = None,
    ) -> list[ClaimRecord | BaseException]:
        """none → PrepareStarted → FinalizerAdded → DevicePrepared… → SpecWritten → Completed,
        for claims without a record (each one's lock held), moving through each step
        together: their reads, finalizers and backend prepares run concurrently (each kind
        bounded by its limit), each durable step is one commit (or one group of spec
        writes) for all of them, and a failpoint is hit per claim after each step.

        A result per claim: its completed record or its error. A claim that fails at any
        step leaves the group at once and, once the others are done, is torn down on its
        own: one claim's failure never holds back or rolls back another's. ``prepared``
        hears of each claim prepared (its index in ``refs``) before those teardowns run.
        """
        out: list[ClaimRecord | BaseException] = [_NOT_DONE] * len(refs)
        claims = await each(refs, self.calls.get_claim, limit=self.calls.api_limit)
        begun: list[_Fresh] = []
        for index, (ref, claim) in enumerate(zip(refs, claims, strict=True)):
            try:
                begun.append(self._intended(index, ref, claim))
            except Exception as exc:  # noqa: BLE001 - this claim's own answer
                out[index] = exc
        failed: list[tuple[_Fresh, Exception]] = []
        live = await self._record_intents(begun, out)
        live = await self._add_finalizers(live, failed)
        live, late = await self._prepare_devices(live, failed)
        finishing = [self._finish(live, failed, out, prepared)]
        finishing += [self._finish_late(f, result, failed, out, prepared) for f, result in late]
        await _all_of(finishing)
        # Every teardown at once: a group holds at most ``max_parallel_claims`` claims.
        undone = await each(failed, self._rolled_back, limit=max(1, len(failed)))
        for (fresh, _), error in zip(failed, undone, strict=True):
            out[fresh.index] = error
        return out

    def _intended(
        self, index: int, ref: ClaimRef, claim: Mapping[str, Any] | Exception | None
    ) -> _Fresh:
        """The claim's ``PrepareStarted`` record, from the claim as read."""
        if isinstance(claim, Exception):
            raise claim
        allocated = source.select_allocation(
            claim, ref, driver=self.settings.driver_name, pool=self.settings.pool_name
        )
        assert claim is not None
        if claim.get("metadata", {}).get("deletionTimestamp"):
            raise errors.ClaimError(
                ref.uid, f"ResourceClaim {ref.namespace}/{ref.name} is being deleted"
            )
        configs = source.claim_configs(claim, self.settings.driver_name)
        # Intent first: the record says the finalizer may be on the claim before it is
        # added, so any failure or crash from here on ends in a teardown that removes it.
        started = ClaimRecord(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            state=ClaimState.PREPARE_STARTED,
            devices=self._device_records(ref.uid, allocated, configs),
            finalizer_added=True,
            boot_id=self.store.boot_id,
            updated_at=now_stamp(),
        )
        return _Fresh(index, ref, claim, started)

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

    async def _add_finalizers(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        async def add(fresh: _Fresh) -> bool:
            return await self.calls.add_finalizer(fresh.ref, current=fresh.claim)

        added = await each(live, add, limit=self.calls.api_limit)
        return _survivors(live, added, failed, self._finalizer_added)

    @staticmethod
    def _finalizer_added(fresh: _Fresh, added: bool) -> None:
        if not added:
            raise errors.ClaimError(
                fresh.ref.uid,
                f"ResourceClaim {fresh.ref.namespace}/{fresh.ref.name} disappeared while preparing",
            )
        failpoints.hit(FP_AFTER_FINALIZER)

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
            written = await each(live, self._write_device_status, limit=self.calls.api_limit)
            for fresh, problem in zip(live, written, strict=True):
                if problem is not None:  # advisory: the claim is prepared all the same
                    log.error(
                        "device status not written",
                        exc_info=(type(problem), problem, problem.__traceback__),
                        extra={"claim_uid": fresh.ref.uid},
                    )
        for fresh in live:
            out[fresh.index] = fresh.record
            with _bound(fresh.ref):
                log.info("prepared", extra={"devices": [d.device for d in fresh.record.devices]})
            if prepared is not None:
                prepared(fresh.index, fresh.record)

    async def _finish_late(
        self,
        fresh: _Fresh,
        result: asyncio.Future[tuple[PreparedDevice, ...] | Exception],
        failed: list[tuple[_Fresh, Exception]],
        out: list[ClaimRecord | BaseException],
        prepared: Callable[[int, ClaimRecord], None] | None,
    ) -> None:
        """A claim whose backend prepare outlasted its group's: the rest of its way alone."""
        live = await self._backend_results([fresh], [await result], failed)
        await self._finish(live, failed, out, prepared)

    async def _prepare_devices(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> tuple[
        list[_Fresh], list[tuple[_Fresh, asyncio.Future[tuple[PreparedDevice, ...] | Exception]]]
    ]:
        """The backend prepares; the claims through them, and those still preparing
        ``LATE_AFTER`` seconds after the others were done (each with its future)."""

        async def prepare(fresh: _Fresh) -> tuple[PreparedDevice, ...]:
            # The backend's own log lines name the claim they are about.
            with _bound(fresh.ref):
                return await self.calls.prepare_claim(fresh.ref, fresh.record.devices)

        on_time, results, late = await self._backend_calls(live, prepare, "backend prepares")
        return await self._backend_results(on_time, results, failed), late

    async def _backend_calls(
        self, items: Sequence[_I], call: Callable[[_I], Awaitable[_T]], what: str
    ) -> tuple[list[_I], list[_T | Exception], list[tuple[_I, asyncio.Future[_T | Exception]]]]:
        """``call`` of each item (bounded by the backend limit): the items done on time
        and their results, and those left late (``LATE_AFTER``), each with its future."""
        results, late = await each_until_late(
            items, call, limit=self.calls.backend_limit, patience=LATE_AFTER
        )
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
                    fresh.record = self._with_states(fresh.record, result.prepared)
                except Exception as exc:  # noqa: BLE001 - this claim's own failure
                    failed.append((fresh, exc))
                    continue
                partial.append((fresh, result))
            else:
                whole.append((fresh, result))
        kept = _survivors([f for f, _ in whole], [r for _, r in whole], failed, self._prepared)
        if partial:
            stored = await self.store.put_many([f.record for f, _ in partial])
            for (fresh, error), put in zip(partial, stored, strict=True):
                cause = error.cause if isinstance(error.cause, Exception) else error
                failed.append((fresh, put if isinstance(put, Exception) else cause))
        return kept

    def _prepared(self, fresh: _Fresh, results: tuple[PreparedDevice, ...]) -> None:
        fresh.record = self._with_states(fresh.record, results)
        fresh.results = results
        for device, result in zip(fresh.record.devices, results, strict=True):
            if any(e.is_empty() for e in (result.edits, *result.more_edits)):
                raise errors.ClaimError(
                    fresh.ref.uid,
                    f"backend returned no container edits for device {device.device}",
                )
            problem = self._external_id_problem(device.external_cdi_ids)
            if problem:
                raise errors.ClaimError(fresh.ref.uid, f"device {device.device}: {problem}")
        failpoints.hit(FP_AFTER_BACKEND_PREPARE)

    async def _write_files(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        """The claims' device metadata files, then the CDI specs that mount them (a
        container never sees a missing file), each group written by one thread."""
        if self.settings.device_metadata and live:
            live = _survivors(live, list(live), failed, self._metadata_documents)
            written = await asyncio.to_thread(self._write_metadata, live)
            live = _survivors(live, written, failed, _hit(FP_AFTER_METADATA))
        live = _survivors(live, list(live), failed, self._spec_document)
        stamps = await self.spec_io.write_many(
            [(f.ref.uid, f.document) for f in live], checked=True
        )
        return _survivors(live, stamps, failed, self._spec_written)

    def _metadata_documents(self, fresh: _Fresh, _: object) -> None:
        fresh.metadata = devicemetadata.documents(
            self.settings.driver_name,
            fresh.ref,
            fresh.record.devices,
            fresh.results,
            fresh.claim,
            versions=self.settings.device_metadata_versions,
        )

    def _write_metadata(self, live: Sequence[_Fresh]) -> list[Exception | None]:
        written: list[Exception | None] = []
        for fresh in live:
            try:
                self.metadata_files.write(fresh.ref.uid, fresh.metadata)
                written.append(None)
            except Exception as exc:  # noqa: BLE001 - this claim's own error
                written.append(exc)
        return written

    def _spec_document(self, fresh: _Fresh, _: object) -> None:
        fresh.document = self._build_spec(
            fresh.ref, fresh.record.devices, fresh.results, fresh.metadata, fresh.claim
        )

    @staticmethod
    def _spec_written(fresh: _Fresh, stamp: cdi_store.SpecStamp) -> None:
        fresh.stamp = stamp
        failpoints.hit(FP_AFTER_SPEC)

    async def _complete(
        self, live: Sequence[_Fresh], failed: list[tuple[_Fresh, Exception]]
    ) -> list[_Fresh]:
        stored = await self.store.put_many(
            [
                f.record.with_state(
                    ClaimState.PREPARE_COMPLETED,
                    cdi_spec=f.document,
                    cdi_spec_stamp=f.stamp,
                    device_metadata=f.metadata,
                )
                for f in live
            ]
        )
        return _survivors(live, stored, failed, _recorded)

    async def _rolled_back(self, failure: tuple[_Fresh, Exception]) -> BaseException:
        """Tear a claim down after its prepare failed; the error to answer it with.

        ``record`` holds every state the backend returned so far, recorded or not; a
        device without one never returned from ``prepare`` in this process, unless the
        call timed out: then what it did is unknown and its states are asked for.
        """
        fresh, exc = failure
        uid = fresh.ref.uid
        try:
            with _bound(fresh.ref):
                await self.teardown(
                    fresh.record,
                    reason=f"prepare failed: {exc}",
                    in_process=not isinstance(exc, BackendTimeoutError),
                )
        except (asyncio.CancelledError, errors.IrreversibleError):
            raise
        except Exception as undo:  # noqa: BLE001 - reported in the claim's answer
            error = errors.ClaimError(
                uid,
                f"prepare failed: {exc}; its rollback could not finish ({undo}) and is "
                "finished by the next call or start",
            )
            error.__cause__ = exc
            return error
        if isinstance(exc, errors.ClaimError | errors.TemporaryError):
            return exc
        error = errors.ClaimError(uid, f"prepare failed: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return error

    async def _write_device_status(self, fresh: _Fresh) -> None:
        """Best effort: the claim is prepared whatever becomes of its status."""
        driver = self.settings.driver_name
        ref = fresh.ref
        try:
            entries = devicestatus.entries(
                driver, fresh.record.devices, fresh.results, claim=fresh.claim
            )
        except devicestatus.DeviceStatusError as error:
            self.metrics.device_status_writes.labels(result="refused").inc()
            log.warning("device status not written: %s", error, extra={"claim_uid": ref.uid})
            return
        await self._apply_device_status(ref, entries)

    async def _apply_device_status(self, ref: ClaimRef, entries: list[dict[str, Any]]) -> None:
        try:
            await self.calls.apply_device_status(ref, self.settings.driver_name, entries)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - status is advisory; the claim goes on
            self.metrics.device_status_writes.labels(result="failed").inc()
            log.warning(
                "could not %s device status: %s",
                "write" if entries else "remove",
                exc,
                extra={"claim_uid": ref.uid},
            )
            return
        self.metrics.device_status_writes.labels(result="ok").inc()

    @staticmethod
    def _with_states(record: ClaimRecord, results: Sequence[PreparedDevice | None]) -> ClaimRecord:
        """The states (and the CDI ids of any further CDI devices) recorded per device."""
        devices = tuple(
            device
            if result is None
            else evolve(
                device.with_prepared_state(result.state),
                cdi_device_ids=_cdi_ids(device, len(result.more_edits)),
                external_cdi_ids=tuple(result.external_cdi_ids),
            )
            for device, result in zip(record.devices, results, strict=True)
        )
        return evolve(record, devices=devices, updated_at=now_stamp())

    def _external_id_problem(self, ids: Sequence[str]) -> str:
        """Why the backend's external CDI ids cannot be given to the kubelet, if so."""
        for external in ids:
            try:
                parsed = cdi_names.parse_qualified_name(external)
            except cdi_names.CDINameError as exc:
                return f"external CDI id {external!r}: {exc}"
            if parsed.kind == self.settings.cdi_kind:
                return (
                    f"external CDI id {external!r} has the driver's own kind "
                    f"{self.settings.cdi_kind}: its specs are dralet's to write"
                )
        return ""

    def _device_records(
        self,
        uid: str,
        allocated: Sequence[AllocatedDevice],
        configs: Sequence[DeviceConfig] = (),
    ) -> tuple[DeviceRecord, ...]:
        by_device: dict[tuple[str, str, str], DeviceRecord] = {}
        for a in allocated:
            key = (a.pool, a.device, a.share_id)
            seen = by_device.get(key)
            names = tuple(sorted({a.request, *(seen.request_names if seen else ())}))
            by_device[key] = DeviceRecord(
                pool=a.pool,
                device=a.device,
                request_names=names,
                cdi_device_ids=(f"{self.settings.cdi_kind}={_cdi_device_name(uid, a)}",),
                admin_access=a.admin_access or bool(seen and seen.admin_access),
                share_id=a.share_id,
                result_fields=seen.result_fields if seen else result_fields(a),
                backend_state=(
                    {
                        CONFIGS_KEY: [
                            _stored_config(c, place)
                            for c, place in zip(a.configs, _places(a.configs, configs), strict=True)
                        ]
                    }
                    if a.configs
                    else {}
                ),
            )
        return tuple(by_device.values())

    def _build_spec(
        self,
        ref: ClaimRef,
        devices: Sequence[DeviceRecord],
        results: Sequence[PreparedDevice],
        metadata: Mapping[str, str],
        claim: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """The claim's CDI spec: a CDI device per device (and per further edits); the
        device metadata mounts go with each request's first device."""
        mounts = (
            devicemetadata.mounts(
                self.settings.driver_name, ref, devices, list(metadata), self.metadata_files, claim
            )
            if metadata
            else {}
        )
        cdi_devices = []
        for index, (d, r) in enumerate(zip(devices, results, strict=True)):
            edits = r.edits
            if index in mounts:
                edits = edits.merged(cdi_spec.ContainerEdits(mounts=tuple(mounts[index])))
            names = _cdi_names(_cdi_device_name(ref.uid, d), len(r.more_edits))
            for name, device_edits in zip(names, (edits, *r.more_edits), strict=True):
                cdi_devices.append(cdi_spec.CDIDevice(name=name, container_edits=device_edits))
        # Validated here, as a value: the spec store then writes it without parsing the
        # document back (``to_json`` is pinned to ``from_json`` by a property test).
        return cdi_spec.to_json(
            cdi_spec.Spec(kind=self.settings.cdi_kind, devices=tuple(cdi_devices))
        )

    def artifacts_present(self, record: ClaimRecord | None, uid: str) -> bool:
        """Whether the claim's CDI spec (and its device metadata files, if it has any)
        are on disk; for a claim without a record, whether any of them is."""
        if record is None:
            return self.specs.exists(uid) or self.metadata_files.has_any(uid)
        if not self.specs.exists(uid):
            return False
        return self.metadata_files.present(uid, list(record.device_metadata))

    async def _remove_metadata(self, uid: str) -> bool:
        """The claim's device metadata files gone for good; whether there were any (a
        claim without any costs one lstat, not a thread hop)."""
        if not self.metadata_files.has_any(uid):
            return False
        return await asyncio.to_thread(self.metadata_files.remove, uid)

    async def remove_orphan_artifacts(self, uid: str) -> str:
        """Remove the spec and metadata files of a claim without a record; what was done
        (``orphan-spec-removed``, ``orphan-metadata-removed`` or nothing)."""
        spec = await self.spec_io.remove(uid)
        metadata = await self._remove_metadata(uid)
        if spec:
            return "orphan-spec-removed"
        return "orphan-metadata-removed" if metadata else ""

    async def rewrite_spec(
        self, record: ClaimRecord, *, expected: bool = False
    ) -> cdi_store.SpecStamp | None:
        """Rewrite a prepared claim's spec and metadata files if they vanished; the new
        spec's stamp (None when nothing was missing). ``expected`` after a reboot, which
        clears /var/run/cdi (logged at info then, not as a warning)."""
        (result,) = await self.rewrite_specs([record], expected=expected)
        if isinstance(result, BaseException):
            raise result
        return result

    async def rewrite_specs(
        self,
        records: Sequence[ClaimRecord],
        *,
        expected: bool = False,
        present: Sequence[bool] | None = None,
    ) -> list[cdi_store.SpecStamp | BaseException | None]:
        """``rewrite_spec`` of several claims (each one's lock held), their spec writes
        handed to the writer together; a result per record: the new stamp, None, or the
        error of that claim alone. ``present``: each claim's ``artifacts_present``, if
        the caller looked under the same locks already."""
        results: list[cdi_store.SpecStamp | BaseException | None] = [None] * len(records)
        wanted: list[int] = []
        for index, record in enumerate(records):
            if record.cdi_spec is None:
                continue
            if (
                present[index]
                if present is not None
                else self.artifacts_present(record, record.uid)
            ):
                continue
            if record.device_metadata:
                try:
                    await asyncio.to_thread(
                        self.metadata_files.write, record.uid, dict(record.device_metadata)
                    )
                except Exception as exc:  # noqa: BLE001 - this claim's own error
                    results[index] = exc
                    continue
            wanted.append(index)
        # A record's spec was checked before the record holding it was written (and
        # its checksum proves it unchanged since): it is not parsed back again.
        written = await self.spec_io.write_many(
            [(records[i].uid, dict(records[i].cdi_spec or {})) for i in wanted], checked=True
        )
        rewritten = 0
        for index, result in zip(wanted, written, strict=True):
            results[index] = result
            if isinstance(result, BaseException):
                continue
            rewritten += 1
            if not expected:
                log.warning(
                    "CDI spec was missing; rewrote it from the claim's record",
                    extra={"claim_uid": records[index].uid},
                )
        if expected and rewritten:
            log.info("rewrote %d CDI specs from their claims' records after a reboot", rewritten)
        return results

    async def survives_reboot(self, records: Sequence[ClaimRecord]) -> list[bool | BaseException]:
        """Whether each claim's devices all survived a reboot (or the error of asking),
        every device of every claim asked in one backend hand-over."""
        answers = iter(
            await self.calls.survives_reboot(
                [(allocated(d), d.prepared_state) for r in records for d in r.devices]
            )
        )
        results: list[bool | BaseException] = []
        for record in records:
            mine = [next(answers) for _ in record.devices]
            error = next((a for a in mine if isinstance(a, BaseException)), None)
            results.append(error if error is not None else all(mine))
        return results

    # ------------------------------------------------------------------ teardown

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
        down = [_Down(index, record) for index, record in enumerate(records)]
        failed: list[tuple[_Down, Exception]] = []
        results: list[BaseException | None] = [None] * len(records)
        down = await self._start_unprepare(down, failed)
        down, late = await self._remove_and_release(down, failed, in_process=in_process)
        finishing = [self._finish_down(down, failed, results, reasons, done)]
        finishing += [
            self._finish_down_late(item, released, failed, results, reasons, done)
            for item, released in late
        ]
        await _all_of(finishing)
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
    ) -> None:
        """The steps after the releases: finalizers, then one commit removing records.
        With ``done`` (a caller that answers each claim as soon as it can: the kubelet's
        unprepare), the claims holding a finalizer are answered once their Released
        record is durable, and the removal, owed from then on, follows the answer."""
        owed = await self._answer_owing(down, failed, reasons, done) if done else set()
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
                with _bound(ref_of(item.record)):
                    log.info("unprepared (%s)", reasons[item.index])
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
        cleanup pass retries it (``plan_settle``: Released → remove the finalizer)."""
        holding = [d for d in down if d.record.finalizer_added]
        if not holding:
            return set()
        owing = [d for d in holding if d.record.state == ClaimState.RELEASED]
        writing = [d for d in holding if d.record.state != ClaimState.RELEASED]
        if writing:
            stored = await self.store.put_many(
                [d.record.with_state(ClaimState.RELEASED) for d in writing]
            )
            owing += _survivors(writing, stored, failed, _released)
        for item in owing:
            with _bound(ref_of(item.record)):
                log.info("unprepared (%s); finalizer removal owed", reasons[item.index])
            done(item.index)
        _survivors(owing, owing, failed, _hit(FP_ANSWERED_FINALIZER_OWED))
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
        _survivors([item], [await released], failed, _hit(FP_AFTER_RELEASE))
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
            [d.record.with_state(ClaimState.UNPREPARE_STARTED) for d in starting]
        )
        outcomes: list[ClaimRecord | BaseException] = []
        for item, result in zip(starting, stored, strict=True):
            if isinstance(result, OSError) and item.record.state == ClaimState.PREPARE_STARTED:
                with _bound(ref_of(item.record)):
                    log.warning(
                        "rolling back without a durable UnprepareStarted",
                        exc_info=(type(result), result, result.__traceback__),
                    )
                result = item.record.with_state(ClaimState.UNPREPARE_STARTED)
            outcomes.append(result)
        _survivors(starting, outcomes, failed, _unprepare_started)
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
        going = _survivors(going, removed, failed, _ignore)
        with_metadata = [d for d in going if self.metadata_files.has_any(d.record.uid)]
        if with_metadata:
            gone = await asyncio.to_thread(self._remove_metadata_of, with_metadata)
            _survivors(with_metadata, gone, failed, _ignore)
            going = _going(going, failed)

        async def release(item: _Down) -> None:
            with _bound(ref_of(item.record)):
                if not in_process and item.record.cdi_spec is None:
                    item.record = await self._recover_states(ref_of(item.record), item.record)
                await self._release(item.record)

        on_time, released, late = await self._backend_calls(going, release, "releases")
        _survivors(on_time, released, failed, _hit(FP_AFTER_RELEASE))
        later = {id(item) for item, _ in late}
        return [d for d in _going(down, failed) if id(d) not in later], late

    def _remove_metadata_of(self, down: Sequence[_Down]) -> list[bool | Exception]:
        gone: list[bool | Exception] = []
        for item in down:
            try:
                gone.append(self.metadata_files.remove(item.record.uid))
            except Exception as exc:  # noqa: BLE001 - this claim's own error
                gone.append(exc)
        return gone

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
                await self._apply_device_status(ref_of(item.record), [])

            await each(holding, clear_status, limit=self.calls.api_limit)

        async def remove(item: _Down) -> bool:
            return await self.calls.remove_finalizer(ref_of(item.record))

        removed = await each(holding, remove, limit=self.calls.api_limit)
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
                [d.record.with_state(ClaimState.RELEASED) for d in kept]
            )
            _survivors(kept, stored, failed, _ignore)
        removed_now = [d for d in holding if not d.stopped]
        _survivors(removed_now, removed_now, failed, _hit(FP_AFTER_FINALIZER_REMOVED))
        return _going(down, failed)

    async def _release(self, record: ClaimRecord) -> None:
        try:
            await self.calls.release_claim(ref_of(record), record.devices)
        except (asyncio.CancelledError, errors.IrreversibleError):
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
        recovered = await self._recover_device_states(ref, record.devices)
        return evolve(record, devices=recovered)

    async def _recover_device_states(
        self, ref: ClaimRef, devices: Sequence[DeviceRecord]
    ) -> tuple[DeviceRecord, ...]:
        try:
            results: Sequence[PreparedDevice | None] = await self.calls.prepare_claim(ref, devices)
        except asyncio.CancelledError:
            raise
        except PartialPrepareError as partial:
            results = partial.prepared
        except Exception:  # noqa: BLE001 - devices that cannot be prepared are not held
            return tuple(devices)
        return tuple(
            d if d.prepared or r is None else d.with_prepared_state(r.state)
            for d, r in zip(devices, results, strict=True)
        )

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
        known = {d.device: d for d in await self._allocation_if_known(ref)}
        recorded = [known[device] for device in held if device in known]
        for device in held:
            if device not in known:
                await self.calls.release_unrecorded(ref, self.settings.pool_name, device)
        if recorded:
            await self.calls.release_claim(ref, await self._recover_device_states(ref, recorded))
        if not await self.calls.remove_finalizer(ref):
            raise errors.ClaimError(ref.uid, "could not remove the claim's finalizer; will retry")

    async def _allocation_if_known(self, ref: ClaimRef) -> tuple[DeviceRecord, ...]:
        try:
            claim = await self.calls.get_claim(ref)
            allocated = source.select_allocation(
                claim,
                ref,
                driver=self.settings.driver_name,
                pool=self.settings.pool_name,
                require_reserved=False,
            )
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - gone or unreachable: release without a state
            return ()
        return self._device_records(
            ref.uid, allocated, source.claim_configs(claim, self.settings.driver_name)
        )

    # ------------------------------------------------------------------ repairs

    async def release_orphan(self, device: str, holder_uid: str) -> bool:
        """Release a device the backend holds for a claim with no record holding it."""
        record, _ = self.store.record(holder_uid)
        if (
            record is not None
            and record.holds_devices
            and any(d.device == device for d in record.devices)
        ):
            return False
        if holder_uid not in (await self.calls.backend.devices_in_use()).get(device, ()):
            return False
        ref = ClaimRef(ClaimUID(holder_uid), "", "")
        await self.calls.release_unrecorded(ref, self.settings.pool_name, device)
        return True

    async def restore_finalizer(self, uid: str) -> bool:
        record, _ = self.store.record(uid)
        if record is None or record.state != ClaimState.PREPARE_COMPLETED:
            return False
        await self.calls.add_finalizer(ref_of(record))
        if not record.finalizer_added:
            await self.store.put(evolve(record, finalizer_added=True))
        return True

    async def remove_foreign_finalizer(self, ref: ClaimRef) -> bool:
        record, corrupt = self.store.record(ref.uid)
        if record is not None or corrupt:
            return False
        await self.calls.remove_finalizer(ref)
        return True

    async def stamp(
        self, revalidated: Sequence[tuple[ClaimRecord, cdi_store.SpecStamp | None]]
    ) -> None:
        """Mark claims revalidated after a reboot (each with the stamp of the spec
        rewritten for it, if one was), in one commit for all of them; call with their
        locks held, so no other instance changed them since they were revalidated. A
        record left unstamped (the commit failed) is simply revalidated again next start.
        """
        stamp = now_stamp()
        results = await self.store.commit(
            [Stamp(r.uid, self.store.boot_id, spec, stamp) for r, spec in revalidated]
        )
        error = next((e for e in results if e is not None), None)
        if error is not None:
            raise error
