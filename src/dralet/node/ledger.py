"""The ledger: the ONE owner of claim state on a node.

Every prepare, unprepare, recovery step and garbage collection goes through here, and
every one follows the same recipe: take the claim's lock (in-process and a ``flock``
shared with any other driver instance on the node), read the checkpoint from disk,
record intent durably, act, record the outcome. Nothing is trusted from memory: the
checkpoint and the CDI directory are the truth, re-read under the lock.

Order of durable steps for one claim:

prepare    ``PrepareStarted`` (devices chosen, exclusivity checked, finalizer marked as
           possibly added) → finalizer on the claim → backend prepare → CDI spec
           written → ``PrepareCompleted``
unprepare  ``UnprepareStarted`` → CDI spec unlinked → backend release → finalizer
           removed → record removed (``Released`` if the finalizer could not be removed
           yet; garbage collection retries it)

A crash between any two steps leaves a state that ``recover`` rolls forward (finish an
unprepare, rewrite a missing spec) or back (undo a prepare that never completed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dralet import errors, failpoints, fsutil, kubenames, logs
from dralet.cdi import spec as cdi_spec
from dralet.cdi import store as cdi_store
from dralet.checkpoint import store as checkpoint_store
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord
from dralet.metrics import DriverMetrics
from dralet.node import claims as claim_checks
from dralet.node.backend import AllocatedDevice, ClaimRef, ClaimUID, DeviceBackend
from dralet.node.settings import DriverSettings
from dralet.node.tasks import TaskSet

__all__ = ["Ledger", "PrepareOutcome", "RecoveryReport", "parse_claim_refs"]

log = logging.getLogger(__name__)


FP_AFTER_FINALIZER = "ledger.prepare.after-finalizer"
FP_AFTER_STARTED = "ledger.prepare.after-started"
FP_AFTER_BACKEND_PREPARE = "ledger.prepare.after-backend"
FP_AFTER_SPEC = "ledger.prepare.after-spec"
FP_AFTER_UNPREPARE_STARTED = "ledger.unprepare.after-started"
FP_AFTER_RELEASE = "ledger.unprepare.after-release"
FP_AFTER_FINALIZER_REMOVED = "ledger.unprepare.after-finalizer"
# Around every call out of the process: a crash just before or just after one leaves the
# device or the API object in a different state than the checkpoint says.
FP_BACKEND_PREPARE_BEFORE = "backend.prepare.before"
FP_BACKEND_PREPARE_AFTER = "backend.prepare.after"
FP_BACKEND_RELEASE_BEFORE = "backend.release.before"
FP_BACKEND_RELEASE_AFTER = "backend.release.after"
FP_API_ADD_FINALIZER_BEFORE = "api.add-finalizer.before"
FP_API_ADD_FINALIZER_AFTER = "api.add-finalizer.after"
FP_API_REMOVE_FINALIZER_BEFORE = "api.remove-finalizer.before"
FP_API_REMOVE_FINALIZER_AFTER = "api.remove-finalizer.after"
failpoints.declare(
    FP_BACKEND_PREPARE_BEFORE,
    FP_BACKEND_PREPARE_AFTER,
    FP_BACKEND_RELEASE_BEFORE,
    FP_BACKEND_RELEASE_AFTER,
    FP_API_ADD_FINALIZER_BEFORE,
    FP_API_ADD_FINALIZER_AFTER,
    FP_API_REMOVE_FINALIZER_BEFORE,
    FP_API_REMOVE_FINALIZER_AFTER,
    FP_AFTER_FINALIZER,
    FP_AFTER_STARTED,
    FP_AFTER_BACKEND_PREPARE,
    FP_AFTER_SPEC,
    FP_AFTER_UNPREPARE_STARTED,
    FP_AFTER_RELEASE,
    FP_AFTER_FINALIZER_REMOVED,
)


def parse_claim_refs(claims: Sequence[tuple[str, str, str]]) -> list[ClaimRef]:
    """Validate ``(namespace, uid, name)`` triples from a request; dedupe by UID.

    Raises ``InvalidRequestError`` naming the first bad field; nothing has been touched.
    """
    refs: dict[str, ClaimRef] = {}
    for index, (namespace, uid, name) in enumerate(claims):
        where = f"claims[{index}]"
        uid_problem = kubenames.uid_problem(uid.lower())
        if uid_problem is not None:
            raise errors.InvalidRequestError(f"{where}: uid {uid[:64]!r} {uid_problem}")
        namespace_problem = kubenames.dns_label_problem(namespace) if namespace else "is empty"
        if namespace_problem is not None:
            raise errors.InvalidRequestError(
                f"{where}: namespace {namespace[:64]!r} {namespace_problem}"
            )
        name_problem = kubenames.dns_subdomain_problem(name) if name else "is empty"
        if name_problem is not None:
            raise errors.InvalidRequestError(f"{where}: name {name[:64]!r} {name_problem}")
        ref = ClaimRef(uid=ClaimUID(uid.lower()), namespace=namespace, name=name)
        seen = refs.get(ref.uid)
        if seen is not None and seen != ref:
            raise errors.InvalidRequestError(
                f"{where}: uid {uid} appears twice with different names "
                f"({seen.namespace}/{seen.name} and {namespace}/{name})"
            )
        refs[ref.uid] = ref
    return list(refs.values())


@dataclass(frozen=True)
class PrepareOutcome:
    devices: tuple[DeviceRecord, ...] = ()
    error: str = ""


@dataclass
class RecoveryReport:
    """What recovery at start (or ``dralet audit --fix``) did, by kind of action."""

    actions: list[tuple[str, str]] = field(default_factory=list)
    fail_closed: str = ""

    def add(self, action: str, subject: str) -> None:
        self.actions.append((action, subject))

    def count(self, action: str) -> int:
        return sum(1 for a, _ in self.actions if a == action)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _allocated(record: DeviceRecord) -> AllocatedDevice:
    return AllocatedDevice(
        request=record.request_names[0] if record.request_names else "",
        pool=record.pool,
        device=record.device,
        admin_access=record.admin_access,
        share_id=record.share_id,
    )


class Ledger:
    """Idempotent prepare/unprepare, two-phase checkpoint, CDI files, recovery, GC."""

    def __init__(
        self,
        settings: DriverSettings,
        *,
        backend: DeviceBackend,
        claims: claim_checks.ClaimSource | None,
        metrics: DriverMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.claims = claims
        self.metrics = metrics or DriverMetrics()
        self.specs = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
        self.checkpoints = checkpoint_store.CheckpointStore(settings.checkpoint_path)
        self.finalizer = claim_checks.finalizer_name(settings.driver_name)
        self.fail_closed = ""
        self._claim_locks: dict[str, asyncio.Lock] = {}
        self._lock_dir_ready = False
        self._checkpoint_lock = asyncio.Lock()
        self._checkpoint_flock = fsutil.FileLock(settings.plugin_dir / "checkpoint.lock")
        self._cache: tuple[bytes, Checkpoint] | None = None
        self._stale_since: dict[str, float] = {}
        self._boot_id = self._read_boot_id()
        self.work = TaskSet("ledger")
        self._parallel = asyncio.Semaphore(settings.max_parallel_claims)

    # ----------------------------------------------------------------- state access

    def _read_boot_id(self) -> str:
        try:
            return self.settings.boot_id_path.read_text().strip()
        except OSError:
            return ""

    def load(self) -> Checkpoint:
        """The checkpoint as stored now.

        The file is read every time (another driver instance may have written it); it is
        parsed again only when its bytes differ from the last ones parsed. Comparing the
        bytes, not inode/mtime/size, cannot be fooled by a reused inode within one tick.
        """
        raw = self.checkpoints.read_raw()
        if raw is None:
            self._cache = None
            return Checkpoint(driver=self.settings.driver_name, boot_id=self._boot_id)
        if self._cache is not None and self._cache[0] == raw:
            return self._cache[1]
        checkpoint = self.checkpoints.decode(raw)
        self._cache = (raw, checkpoint)
        return checkpoint

    @contextlib.asynccontextmanager
    async def _checkpoint_txn(self) -> AsyncIterator[list[Checkpoint]]:
        """Read-modify-write of the checkpoint under the node-wide checkpoint lock.

        The body gets a one-element list holding the current checkpoint and replaces
        it; the new value is saved atomically when the body returns without error.
        """
        async with self._checkpoint_lock, self._checkpoint_flock.acquire():
            current = self.load()
            box = [current]
            yield box
            if box[0] is not current:
                new = replace(box[0], driver=self.settings.driver_name, boot_id=self._boot_id)
                raw = self.checkpoints.save(new)
                # The file now holds exactly these bytes: keep the value instead of
                # parsing it again on the next read.
                self._cache = (raw, new)
                self.metrics.claims_prepared.set(
                    sum(1 for r in new.claims.values() if r.state == ClaimState.PREPARE_COMPLETED)
                )

    async def _update(self, change: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        async with self._checkpoint_txn() as box:
            box[0] = change(box[0])
            return box[0]

    async def _put(self, record: ClaimRecord) -> ClaimRecord:
        record = replace(record, updated_at=_now())
        await self._update(lambda cp: cp.with_claim(record))
        return record

    async def _drop(self, uid: str) -> None:
        await self._update(lambda cp: cp.without_claim(uid))

    @contextlib.asynccontextmanager
    async def _claim_lock(self, uid: str) -> AsyncIterator[None]:
        lock = self._claim_locks.setdefault(uid, asyncio.Lock())
        try:
            async with lock:
                if not self._lock_dir_ready:
                    fsutil.ensure_private_dir(self.settings.lock_dir)
                    self._lock_dir_ready = True
                async with fsutil.FileLock(self.settings.lock_dir / f"{uid}.lock").acquire(
                    remove=True
                ):
                    yield
        finally:
            if not lock.locked() and self._claim_locks.get(uid) is lock:
                del self._claim_locks[uid]

    # ----------------------------------------------------------------- calls out

    async def _add_finalizer(self, namespace: str, name: str, uid: str) -> bool:
        assert self.claims is not None
        failpoints.hit(FP_API_ADD_FINALIZER_BEFORE)
        added = await self.claims.add_finalizer(namespace, name, uid, self.finalizer)
        failpoints.hit(FP_API_ADD_FINALIZER_AFTER)
        return added

    async def _remove_finalizer(self, namespace: str, name: str, uid: str) -> bool:
        assert self.claims is not None
        failpoints.hit(FP_API_REMOVE_FINALIZER_BEFORE)
        removed = await self.claims.remove_finalizer(namespace, name, uid, self.finalizer)
        failpoints.hit(FP_API_REMOVE_FINALIZER_AFTER)
        return removed

    async def _release(
        self, ref: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        failpoints.hit(FP_BACKEND_RELEASE_BEFORE)
        await self.backend.release(ref, device, state)
        failpoints.hit(FP_BACKEND_RELEASE_AFTER)

    # ----------------------------------------------------------------- public calls

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareOutcome]:
        """Prepare every claim; one outcome per claim UID, failures per claim."""
        return await self._run_each(refs, "prepare", self._prepare_guarded)

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; unknown claims succeed. Returns UID → error ('' = OK)."""
        outcomes = await self._run_each(refs, "unprepare", self._unprepare_guarded)
        return {uid: outcome.error for uid, outcome in outcomes.items()}

    async def _run_each(
        self,
        refs: Sequence[ClaimRef],
        operation: str,
        one: Callable[[ClaimRef], Any],
    ) -> dict[str, PrepareOutcome]:
        # Each claim runs as a ledger-owned task: if the caller gives up (deadline), the
        # claim's work still finishes and records its outcome, so a later unprepare
        # (which waits on the claim lock) sees a consistent state.
        tasks = {ref.uid: self.work.spawn(f"{operation}:{ref.uid}", one(ref)) for ref in refs}
        results: dict[str, PrepareOutcome] = {}
        for uid, task in tasks.items():
            results[uid] = await asyncio.shield(task)
        return results

    async def _timed(
        self, operation: str, ref: ClaimRef, body: Callable[[], Any]
    ) -> PrepareOutcome:
        started = time.perf_counter()
        result = "error"
        try:
            # Every log line of this claim's work carries the claim (the RPC's request id
            # is already bound: tasks inherit the caller's context).
            with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
                async with self._parallel:
                    outcome: PrepareOutcome = await body()
            result = "success"
            return outcome
        except asyncio.CancelledError:
            raise
        except errors.ClaimError as exc:
            log.warning(
                "%s failed: %s",
                operation,
                exc,
                extra={"claim_uid": ref.uid, "claim": f"{ref.namespace}/{ref.name}"},
            )
            return PrepareOutcome(error=str(exc))
        except errors.IrreversibleError as exc:
            log.exception("%s failed irreversibly", operation, extra={"claim_uid": ref.uid})
            return PrepareOutcome(error=f"irreversible failure, manual repair needed: {exc}")
        except Exception as exc:
            log.exception("%s failed unexpectedly", operation, extra={"claim_uid": ref.uid})
            return PrepareOutcome(error=f"{operation} failed: {type(exc).__name__}: {exc}")
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.operation_seconds.labels(operation, result).observe(elapsed)
            self.metrics.operations.labels(operation, result).inc()

    async def _prepare_guarded(self, ref: ClaimRef) -> PrepareOutcome:
        return await self._timed("prepare", ref, lambda: self._prepare_one(ref))

    async def _unprepare_guarded(self, ref: ClaimRef) -> PrepareOutcome:
        return await self._timed("unprepare", ref, lambda: self._unprepare_one(ref))

    # ----------------------------------------------------------------- prepare

    async def _prepare_one(self, ref: ClaimRef) -> PrepareOutcome:
        async with self._claim_lock(ref.uid):
            record = self._load_for_claim(ref).claims.get(ref.uid)
            if record is not None and record.state == ClaimState.PREPARE_COMPLETED:
                if (record.namespace, record.name) != (ref.namespace, ref.name):
                    raise errors.ClaimError(
                        ref.uid,
                        f"claim UID {ref.uid} is prepared as {record.namespace}/{record.name}, "
                        f"not {ref.namespace}/{ref.name}",
                    )
                self._ensure_spec(record)
                return PrepareOutcome(devices=record.devices)
            if record is not None:
                # Half-done work from a crash or an earlier failure: undo it first.
                await self._teardown(record, reason="retry after interrupted work")
            if self.fail_closed:
                raise errors.ClaimError(ref.uid, f"not preparing new claims: {self.fail_closed}")
            return PrepareOutcome(devices=await self._prepare_fresh(ref))

    def _load_for_claim(self, ref: ClaimRef) -> Checkpoint:
        if self.fail_closed:
            return Checkpoint()
        try:
            return self.load()
        except errors.CheckpointCorruptError as exc:
            self.enter_fail_closed(str(exc))
            raise errors.ClaimError(ref.uid, str(exc)) from exc

    async def _prepare_fresh(self, ref: ClaimRef) -> tuple[DeviceRecord, ...]:
        if self.claims is None:
            raise errors.ClaimError(ref.uid, "no ResourceClaim source configured")
        claim = await self.claims.get_claim(ref.namespace, ref.name)
        allocated = claim_checks.select_allocation(
            claim, ref, driver=self.settings.driver_name, pool=self.settings.pool_name
        )
        assert claim is not None
        if claim.get("metadata", {}).get("deletionTimestamp"):
            raise errors.ClaimError(
                ref.uid, f"ResourceClaim {ref.namespace}/{ref.name} is being deleted"
            )
        devices = self._device_records(ref.uid, allocated)
        self._check_exclusive(ref, devices, self.load())

        # Intent first: the record says the finalizer may be on the claim before it is
        # added, so any failure or crash from here on ends in a teardown that removes it.
        started = ClaimRecord(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            state=ClaimState.PREPARE_STARTED,
            devices=devices,
            finalizer_added=True,
            boot_id=self._boot_id,
        )

        def record_intent(cp: Checkpoint) -> Checkpoint:
            self._check_exclusive(ref, devices, cp)
            return cp.with_claim(replace(started, updated_at=_now()))

        try:
            await self._update(record_intent)
        except asyncio.CancelledError:
            raise
        except errors.ClaimError:
            raise
        except Exception:
            # The write may have failed after its rename (EIO on the directory fsync):
            # take the intent back so the claim's error leaves the node as it was.
            with contextlib.suppress(Exception):
                if ref.uid in self.load().claims:
                    await self._drop(ref.uid)
            raise
        failpoints.hit(FP_AFTER_STARTED)

        try:
            if not await self._add_finalizer(ref.namespace, ref.name, ref.uid):
                raise errors.ClaimError(
                    ref.uid, f"ResourceClaim {ref.namespace}/{ref.name} disappeared while preparing"
                )
            failpoints.hit(FP_AFTER_FINALIZER)
            prepared = await self._backend_prepare(ref, devices)
            failpoints.hit(FP_AFTER_BACKEND_PREPARE)
            document = self._build_spec(ref, prepared)
            self.specs.write(ref.uid, document)
            failpoints.hit(FP_AFTER_SPEC)
            # Recording the completion can fail too (ENOSPC): that rolls back like any
            # other step, instead of leaving a spec and a held device behind an error.
            completed = await self._put(
                started.with_state(
                    ClaimState.PREPARE_COMPLETED,
                    devices=tuple(d for d, _ in prepared),
                    cdi_spec=document,
                )
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._teardown(started, reason=f"prepare failed: {exc}")
            if isinstance(exc, errors.ClaimError):
                raise
            raise errors.ClaimError(
                ref.uid, f"prepare failed: {type(exc).__name__}: {exc}"
            ) from exc
        log.info(
            "prepared",
            extra={
                "claim_uid": ref.uid,
                "claim": f"{ref.namespace}/{ref.name}",
                "devices": [d.device for d in completed.devices],
            },
        )
        return completed.devices

    def _device_records(
        self, uid: str, allocated: Sequence[AllocatedDevice]
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
                cdi_device_ids=(f"{self.settings.cdi_kind}={self._cdi_device_name(uid, a)}",),
                admin_access=a.admin_access or bool(seen and seen.admin_access),
                share_id=a.share_id,
                backend_state={"config": list(a.config)} if a.config else {},
            )
        return tuple(by_device.values())

    def _cdi_device_name(self, uid: str, device: DeviceRecord | AllocatedDevice) -> str:
        suffix = f"-{device.share_id}" if device.share_id else ""
        return f"{uid}-{device.device}{suffix}"

    def _check_exclusive(
        self, ref: ClaimRef, devices: Sequence[DeviceRecord], cp: Checkpoint
    ) -> None:
        for d in devices:
            if d.admin_access:
                continue  # admin access observes a device without owning it
            holder = cp.holder_of(d.pool, d.device, share_id=d.share_id)
            if holder is not None and holder.uid != ref.uid:
                raise errors.DeviceBusyError(
                    ref.uid, device=f"{d.pool}/{d.device}", holder_uid=holder.uid
                )

    async def _backend_prepare(
        self, ref: ClaimRef, devices: Sequence[DeviceRecord]
    ) -> list[tuple[DeviceRecord, cdi_spec.ContainerEdits]]:
        prepared: list[tuple[DeviceRecord, cdi_spec.ContainerEdits]] = []
        for d in devices:
            allocated = replace(_allocated(d), config=tuple(d.backend_state.get("config", ())))
            failpoints.hit(FP_BACKEND_PREPARE_BEFORE)
            result = await self.backend.prepare(ref, allocated)
            failpoints.hit(FP_BACKEND_PREPARE_AFTER)
            if result.edits.is_empty():
                raise errors.ClaimError(
                    ref.uid, f"backend returned no container edits for device {d.device}"
                )
            record = replace(d, backend_state={**d.backend_state, **dict(result.state)})
            prepared.append((record, result.edits))
        return prepared

    def _build_spec(
        self, ref: ClaimRef, prepared: Sequence[tuple[DeviceRecord, cdi_spec.ContainerEdits]]
    ) -> dict[str, Any]:
        spec = cdi_spec.Spec(
            kind=self.settings.cdi_kind,
            devices=tuple(
                cdi_spec.CDIDevice(name=self._cdi_device_name(ref.uid, d), container_edits=edits)
                for d, edits in prepared
            ),
        )
        return cdi_spec.to_json(spec)

    def _ensure_spec(self, record: ClaimRecord) -> bool:
        """Rewrite a prepared claim's spec if it vanished (a reboot clears /var/run/cdi)."""
        if record.cdi_spec is None or self.specs.exists(record.uid):
            return False
        self.specs.write(record.uid, dict(record.cdi_spec))
        self.metrics.recovery_actions.labels("spec-rewritten").inc()
        log.warning(
            "CDI spec was missing; rewrote it from the checkpoint", extra={"claim_uid": record.uid}
        )
        return True

    # ----------------------------------------------------------------- unprepare

    async def _unprepare_one(self, ref: ClaimRef) -> PrepareOutcome:
        async with self._claim_lock(ref.uid):
            if self.fail_closed:
                await self._unprepare_without_checkpoint(ref)
                return PrepareOutcome()
            record = self._load_for_claim(ref).claims.get(ref.uid)
            if record is None:
                # Unknown or already unprepared: success. A spec of ours for this UID
                # without a record can only be debris; remove it.
                if self.specs.remove(ref.uid):
                    self.metrics.recovery_actions.labels("orphan-spec-removed").inc()
                return PrepareOutcome()
            await self._teardown(record, reason="unprepare")
            return PrepareOutcome()

    async def _unprepare_without_checkpoint(self, ref: ClaimRef) -> None:
        """Fail-closed unprepare: the CDI dir and the backend prove what was prepared.

        The kubelet's request names the claim, so its finalizer goes too once nothing is
        held any more; otherwise the ResourceClaim could never be deleted.
        """
        self.specs.remove(ref.uid)
        in_use = await self.backend.devices_in_use()
        for device, holder in sorted(in_use.items()):
            if holder == ref.uid:
                await self._release(
                    ref,
                    AllocatedDevice(request="", pool=self.settings.pool_name, device=device),
                    {},
                )
        if self.claims is not None and not await self._remove_finalizer(
            ref.namespace, ref.name, ref.uid
        ):
            raise errors.ClaimError(ref.uid, "could not remove the claim's finalizer; will retry")

    async def _teardown(self, record: ClaimRecord, *, reason: str) -> None:
        """Undo whatever a record says may have happened; ends with the record gone.

        Used for unprepare, for rolling back an interrupted prepare, and by recovery.
        """
        ref = ClaimRef(ClaimUID(record.uid), record.namespace, record.name)
        if record.state in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED):
            record = await self._put(record.with_state(ClaimState.UNPREPARE_STARTED))
            failpoints.hit(FP_AFTER_UNPREPARE_STARTED)
        if record.state == ClaimState.UNPREPARE_STARTED:
            # The spec goes first: no container may start with a device being released.
            self.specs.remove(record.uid)
            for d in record.devices:
                try:
                    await self._release(ref, _allocated(d), d.backend_state)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    raise errors.ClaimError(
                        record.uid, f"releasing device {d.device} failed: {exc}; will retry"
                    ) from exc
            failpoints.hit(FP_AFTER_RELEASE)
        if record.finalizer_added and self.claims is not None:
            try:
                removed = await self._remove_finalizer(record.namespace, record.name, record.uid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any API failure only delays the removal
                log.warning(
                    "could not remove finalizer yet (%s); will retry",
                    exc,
                    extra={"claim_uid": record.uid},
                )
                removed = False
            if not removed:
                if record.state != ClaimState.RELEASED:
                    await self._put(record.with_state(ClaimState.RELEASED))
                return
            failpoints.hit(FP_AFTER_FINALIZER_REMOVED)
        await self._drop(record.uid)
        self._stale_since.pop(record.uid, None)
        log.info(
            "unprepared (%s)",
            reason,
            extra={"claim_uid": record.uid, "claim": f"{record.namespace}/{record.name}"},
        )

    # ----------------------------------------------------------------- recovery

    def enter_fail_closed(self, reason: str) -> None:
        """Stop trusting the checkpoint (found unusable while running); keep a copy."""
        if not self.fail_closed:
            try:
                kept = self.checkpoints.keep_aside()
            except OSError:
                kept = None
                log.exception("could not keep a copy of the unusable checkpoint")
            self.fail_closed = f"{reason} (copy kept at {kept})" if kept else reason
            self.metrics.checkpoint_errors.labels("corrupt").inc()
            log.error("checkpoint unusable, failing closed: %s", self.fail_closed)

    async def recover(self) -> RecoveryReport:
        """Reconcile checkpoint, CDI directory and backend at start, before serving.

        Every repair runs the same code as the normal path, under the claim's lock, so
        recovery is idempotent and safe beside another running driver instance.
        """
        report = RecoveryReport()
        fsutil.ensure_private_dir(self.settings.plugin_dir)
        self.specs.ensure_dir()
        for stray in self.specs.stray_temp_files():
            stray.unlink(missing_ok=True)
            report.add("temp-file-removed", stray.name)
        try:
            checkpoint = self.load()
        except errors.CheckpointCorruptError as exc:
            return await self._recover_corrupt(exc, report)
        spec_uids = {f.claim_uid for f in self.specs.scan()}
        revalidated: list[ClaimRecord] = []
        for uid, record in sorted(checkpoint.claims.items()):
            if self._needs_recovery(record, spec_uids):
                await self._recover_claim(
                    uid, spec_uids=spec_uids, report=report, revalidated=revalidated
                )
        if revalidated:
            await self._update(lambda cp: self._stamp_boot_id(cp, revalidated))
        final = self.load()
        for uid in sorted(spec_uids - set(final.claims)):
            async with self._claim_lock(uid):
                if uid not in self.load().claims and self.specs.remove(uid):
                    report.add("orphan-spec-removed", uid)
        await self._release_orphan_devices(report)
        if final.boot_id != self._boot_id and final.claims:
            await self._update(lambda cp: replace(cp))  # a new value is saved: stamps the boot ID
        for action, _ in report.actions:
            self.metrics.recovery_actions.labels(action).inc()
        self.metrics.claims_prepared.set(
            sum(1 for r in self.load().claims.values() if r.state == ClaimState.PREPARE_COMPLETED)
        )
        return report

    def _rebooted_since(self, record: ClaimRecord) -> bool:
        return bool(record.boot_id) and bool(self._boot_id) and record.boot_id != self._boot_id

    def _needs_recovery(self, record: ClaimRecord, spec_uids: set[str]) -> bool:
        if record.state != ClaimState.PREPARE_COMPLETED:
            return True
        return self._rebooted_since(record) or record.uid not in spec_uids

    def _stamp_boot_id(self, cp: Checkpoint, revalidated: Sequence[ClaimRecord]) -> Checkpoint:
        """Mark claims revalidated after a reboot, in one write for all of them.

        A record changed since it was revalidated (another instance unprepared it) is
        left alone; a record still unstamped is simply revalidated again next start.
        """
        claims = dict(cp.claims)
        for record in revalidated:
            if claims.get(record.uid) == record:
                claims[record.uid] = replace(record, boot_id=self._boot_id, updated_at=_now())
        return replace(cp, claims=claims)

    async def _recover_claim(
        self,
        uid: str,
        *,
        spec_uids: set[str],
        report: RecoveryReport,
        revalidated: list[ClaimRecord],
    ) -> None:
        async with self._claim_lock(uid):
            record = self.load().claims.get(uid)
            if record is None:
                return
            if record.state == ClaimState.PREPARE_STARTED:
                await self._teardown(record, reason="rolled back: prepare never completed")
                report.add("prepare-rolled-back", uid)
            elif record.state == ClaimState.UNPREPARE_STARTED:
                await self._teardown(record, reason="finished interrupted unprepare")
                report.add("unprepare-finished", uid)
            elif record.state == ClaimState.RELEASED:
                await self._teardown(record, reason="finalizer removal retried")
                report.add("finalizer-retried", uid)
            elif self._rebooted_since(record):
                survives = [
                    await self.backend.survives_reboot(_allocated(d), d.backend_state)
                    for d in record.devices
                ]
                if all(survives):
                    if record.cdi_spec is not None:
                        self.specs.write(uid, dict(record.cdi_spec))
                    revalidated.append(record)  # stamped in one write after the loop
                    report.add("revalidated-after-reboot", uid)
                else:
                    await self._teardown(record, reason="device state did not survive a reboot")
                    report.add("rolled-back-after-reboot", uid)
            elif uid not in spec_uids and record.cdi_spec is not None:
                self.specs.write(uid, dict(record.cdi_spec))
                report.add("spec-rewritten", uid)

    async def _release_orphan_devices(self, report: RecoveryReport) -> None:
        in_use = await self.backend.devices_in_use()
        recorded = {
            (d.device, uid)
            for uid, record in self.load().claims.items()
            if record.holds_devices
            for d in record.devices
        }
        for device, holder_uid in sorted(in_use.items()):
            if (device, holder_uid) in recorded:
                continue  # the common case, proven without a lock: nothing to do
            async with self._claim_lock(holder_uid):
                record = self.load().claims.get(holder_uid)
                if (
                    record is not None
                    and record.holds_devices
                    and any(d.device == device for d in record.devices)
                ):
                    continue
                if (await self.backend.devices_in_use()).get(device) != holder_uid:
                    continue
                ref = ClaimRef(ClaimUID(holder_uid), "", "")
                await self._release(
                    ref,
                    AllocatedDevice(request="", pool=self.settings.pool_name, device=device),
                    {},
                )
                report.add("orphan-device-released", f"{device} (claim {holder_uid})")

    async def _recover_corrupt(
        self, exc: errors.CheckpointCorruptError, report: RecoveryReport
    ) -> RecoveryReport:
        kept = self.checkpoints.keep_aside()
        self.metrics.checkpoint_errors.labels("corrupt").inc()
        specs = self.specs.scan()
        in_use = await self.backend.devices_in_use()
        if not specs and not in_use:
            # Provably nothing is prepared on this node: starting empty loses nothing.
            self.checkpoints.reset()
            self._cache = None
            report.add("corrupt-checkpoint-reset", f"{exc.reason} (copy kept at {kept})")
            log.error(
                "checkpoint was unusable (%s); nothing was prepared, so it was reset; copy at %s",
                exc.reason,
                kept,
            )
            return report
        self.fail_closed = f"{exc} (copy kept at {kept}); {len(specs)} claims still have CDI specs"
        report.fail_closed = self.fail_closed
        log.error("failing closed: %s", self.fail_closed)
        return report

    # ----------------------------------------------------------------- garbage collection

    async def collect_stale(self, *, now: float | None = None, force: bool = False) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone, replaced or no longer ours.

        A claim must look stale for ``stale_claim_grace`` seconds first: the kubelet
        normally unprepares on its own, and this only covers what it lost track of.
        Also retries pending finalizer removals. Returns the UIDs cleaned up.
        """
        if self.claims is None or self.fail_closed:
            return []
        current = time.monotonic() if now is None else now
        cleaned: list[str] = []
        for uid, record in sorted(self.load().claims.items()):
            if record.state == ClaimState.RELEASED:
                async with self._claim_lock(uid):
                    again = self.load().claims.get(uid)
                    if again is not None and again.state == ClaimState.RELEASED:
                        await self._teardown(again, reason="finalizer removal retried")
                continue
            reason = await self._stale_reason(record)
            if reason is None:
                self._stale_since.pop(uid, None)
                continue
            first_seen = self._stale_since.setdefault(uid, current)
            if not force and current - first_seen < self.settings.stale_claim_grace:
                continue
            async with self._claim_lock(uid):
                again = self.load().claims.get(uid)
                if again is None:
                    continue
                log.warning(
                    "cleaning up stale claim: %s",
                    reason,
                    extra={"claim_uid": uid, "claim": f"{record.namespace}/{record.name}"},
                )
                await self._teardown(again, reason=f"stale: {reason}")
            self.metrics.stale_claim_cleanups.inc()
            cleaned.append(uid)
        return cleaned

    async def _stale_reason(self, record: ClaimRecord) -> str | None:
        assert self.claims is not None
        claim = await self.claims.get_claim(record.namespace, record.name)
        found = claim_checks.staleness(
            claim,
            ClaimRef(ClaimUID(record.uid), record.namespace, record.name),
            driver=self.settings.driver_name,
            pool=self.settings.pool_name,
        )
        return found.message if found else None

    def known_claims(self) -> Mapping[str, ClaimRecord]:
        return self.load().claims

    async def release_foreign_finalizer(self, namespace: str, name: str, uid: str) -> list[str]:
        """Remove our finalizer from a claim this node has no record of (audit repair)."""
        if self.claims is None:
            return []
        async with self._claim_lock(uid):
            if uid in self.load().claims:
                return []
            await self._remove_finalizer(namespace, name, uid)
        return ["foreign-finalizer-removed"]

    async def restore_finalizer(self, uid: str) -> list[str]:
        """Put our finalizer back on a prepared claim that lost it (audit repair)."""
        if self.claims is None:
            return []
        async with self._claim_lock(uid):
            record = self.load().claims.get(uid)
            if record is None or record.state != ClaimState.PREPARE_COMPLETED:
                return []
            await self._add_finalizer(record.namespace, record.name, uid)
            if not record.finalizer_added:
                await self._put(replace(record, finalizer_added=True))
        return ["finalizer-restored"]
