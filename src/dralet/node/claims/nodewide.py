"""Node-wide work through the planner: recovery at start, stale-claim cleanup, audit --fix.

Recovery and ``audit --fix`` take a snapshot and plan with ``plan_node`` (the
same plan ``dralet audit`` prints); the stale-claim pass reads each recorded claim from
the API and plans it with ``plan_stale`` (the rule ``plan_node`` applies to the
claims it lists) and ``plan.plan_repair``. Each claim's steps run under that claim's
lock after observing it again there (``Observer``): another driver instance may have
moved it on. All of it works on the engine's ``Parts``, never on the engine.

Recovery is per claim: a claim whose step fails (disk full, read-only CDI dir, I/O
error) stays recorded and is retried with backoff while the driver serves; nothing a
single claim does makes the process exit.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dralet import errors, fsutil, gcpause
from dralet.cdi.store import SpecStamp
from dralet.checkpoint import storefiles
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims import calls, plan
from dralet.node.claims.findings import (
    BY_FIX,
    BY_START,
    Finding,
    lost_store_hint,
    plan_node,
    plan_stale,
    steps_of,
    take_snapshot,
)
from dralet.node.claims.group import each
from dralet.node.claims.parts import Parts
from dralet.node.claims.plan import ClaimView

__all__ = [
    "RecoveryReport",
    "accept_lost_store",
    "collect_stale",
    "fix",
    "recover",
]

log = logging.getLogger("dralet.node.claims")

RETRY_MAX = 60.0
REVALIDATE_CHUNK = 256
"""Claims revalidated after a reboot under their locks at once."""


@dataclass
class RecoveryReport:
    """What recovery at start (or ``dralet audit --fix``) did, by kind of action."""

    actions: list[tuple[str, str]] = field(default_factory=list)
    fail_closed: str = ""
    deferred: list[tuple[str, str]] = field(default_factory=list)
    """Claims whose recovery step failed, with why; they are retried in the background."""

    def add(self, action: str, subject: str) -> None:
        if action:
            self.actions.append((action, subject))

    def count(self, action: str) -> int:
        return sum(1 for a, _ in self.actions if a == action)


async def recover(parts: Parts, *, retry_later: bool = True) -> RecoveryReport:
    """Repair what ``plan_node`` marks ``by="start"``; claim by claim, never aborting."""
    with gcpause.paused():  # every record decoded and planned at once
        return await _recover(parts, retry_later=retry_later)


async def _recover(parts: Parts, *, retry_later: bool) -> RecoveryReport:
    report = RecoveryReport()
    try:
        fsutil.ensure_private_dir(parts.settings.plugin_dir)
        parts.specs.ensure_dir()
        for stray in parts.specs.sweep_temp_files():
            report.add("temp-file-removed", stray.name)
        metadata_root = parts.metadata_files.root
        for stray in fsutil.sweep_temp_files(metadata_root, recursive=True):
            report.add("temp-file-removed", str(stray.relative_to(metadata_root)))
    except OSError as exc:
        log.error("cannot tidy the driver's directories yet: %s", exc)  # noqa: TRY400
    try:
        await _refuse_lost_store(parts)
        records = await asyncio.to_thread(parts.store.open)
    except errors.CheckpointCorruptError as exc:
        return await _recover_corrupt(parts, exc, report)
    except OSError as exc:  # the disk, not the data: the driver serves and retries
        log.error("cannot read the claim records yet: %s", exc)  # noqa: TRY400
        report.deferred.append(("checkpoint", str(exc)))
        parts.pending_recovery.add("checkpoint")
        if retry_later:
            parts.work.spawn("recovery-retry", _retry_forever(parts))
        return report
    parts.pending_recovery.discard("checkpoint")
    snapshot = await take_snapshot(
        parts.settings, backend=parts.backend, records=records, trust_stamps=True
    )
    findings = steps_of(plan_node(snapshot), by=frozenset({BY_START}))
    await _execute(parts, findings, report, known=records)
    await _try(parts, report, "checkpoint", lambda: asyncio.to_thread(parts.store.checkpoint))
    for action, times in collections.Counter(a for a, _ in report.actions).items():
        parts.metrics.recovery_actions.labels(action).inc(times)
    if report.deferred and retry_later:
        parts.work.spawn("recovery-retry", _retry_forever(parts))
    return report


async def _try(parts: Parts, report: RecoveryReport, subject: str, step: object) -> bool:
    try:
        await step()  # type: ignore[operator]
    except errors.GOES_UP:
        raise
    except Exception as exc:  # noqa: BLE001 - one claim's failure never stops the others
        _defer(parts, report, subject, exc)
        return False
    parts.pending_recovery.discard(subject)
    return True


def _defer(parts: Parts, report: RecoveryReport, subject: str, exc: BaseException) -> None:
    """``subject``'s step failed: retried later (an irreversible failure goes up)."""
    if errors.goes_up(exc):
        raise exc
    log.error("recovery of %s deferred: %s", subject, exc)
    report.deferred.append((subject, str(exc)))
    parts.pending_recovery.add(subject)


async def _execute(
    parts: Parts,
    findings: Sequence[Finding],
    report: RecoveryReport,
    *,
    known: Snapshot | None = None,
) -> None:
    # Claims are repaired concurrently (each under its own lock, as many at once as
    # claims are prepared), so their durable writes share commits and fsyncs.
    slots = asyncio.Semaphore(parts.settings.max_parallel_claims)

    async def one(finding: Finding) -> None:
        async def step() -> None:
            report.add(*await _run_finding(parts, finding, plan.Action(finding.action)))

        async with slots:
            await _try(parts, report, finding.subject, step)

    rebooted = [f.subject for f in findings if f.action == plan.Action.REVALIDATE]
    findings = [f for f in findings if f.action != plan.Action.REVALIDATE]
    await asyncio.gather(*(one(finding) for finding in findings))
    for start in range(0, len(rebooted), REVALIDATE_CHUNK):
        await _revalidate(parts, rebooted[start : start + REVALIDATE_CHUNK], report, known)


async def _run_finding(
    parts: Parts,
    finding: Finding,
    action: plan.Action,
) -> tuple[str, str]:
    if action is plan.Action.RELEASE_ORPHAN_DEVICE:
        holders = (await parts.backend.devices_in_use()).get(finding.subject, frozenset())
        released = []
        for holder in sorted(holders):
            async with parts.store.claim_lock(holder):
                if await parts.repairs.release_orphan(finding.subject, holder):
                    released.append(holder)
        if not released:
            return "", ""
        return "orphan-device-released", f"{finding.subject} (claim {', '.join(released)})"
    if action is plan.Action.REMOVE_FOREIGN_FINALIZER:
        ref = ClaimRef(ClaimUID(finding.subject), finding.namespace, finding.name)
        async with parts.store.claim_lock(ref.uid):
            done = await parts.repairs.remove_foreign_finalizer(ref)
        return ("foreign-finalizer-removed", ref.uid) if done else ("", "")
    if action is plan.Action.RESTORE_FINALIZER:
        async with parts.store.claim_lock(finding.subject):
            done = await parts.repairs.restore_finalizer(finding.subject)
        return ("finalizer-restored", finding.subject) if done else ("", "")
    if action is plan.Action.RESET_CHECKPOINT:
        return "", ""  # only on a corrupt checkpoint: recover() decides with the backend
    async with parts.store.claim_lock(finding.subject):
        if finding.kind == "invalid-spec" and action is plan.Action.REWRITE_SPEC:
            # Unlinked (as unprepare unlinks specs), then rewritten from the record.
            await parts.spec_io.remove(finding.subject)
        view = await parts.observer.one(finding.subject)
        # Planned again under the lock: the finding may be out of date by now.
        if action is plan.Action.UNPREPARE_STALE:
            if view.record is None:
                return "", ""
        elif action not in plan.plan_repair(view):
            return "", ""
        return await parts.repairs.run_step(action, view, reason=finding.message), finding.subject


async def _revalidate(
    parts: Parts, uids: Sequence[str], report: RecoveryReport, known: Snapshot | None
) -> None:
    """Claims prepared before a reboot, a chunk at a time under their locks: each one's
    devices asked whether they survived, the specs of those that did rewritten in one
    hand-over to the spec writer, the others rolled back; the revalidated records are
    stamped in one commit. Per claim, as ``_try``: a claim whose step fails is deferred
    alone (a failed stamp leaves its claims to be revalidated again at the next start)."""
    async with parts.store.claim_locks(uids):
        # Planned again under the locks: another instance may have moved a claim on.
        views: list[ClaimView] = []
        for uid, view in zip(uids, await parts.observer.group(uids, known=known), strict=True):
            if isinstance(view, BaseException):
                _defer(parts, report, uid, view)
            elif view.record is not None and plan.Action.REVALIDATE in plan.plan_repair(view):
                views.append(view)
        records = [view.record for view in views if view.record is not None]
        survived = await parts.repairs.survives_reboot(records)
        keep: list[ClaimRecord] = []
        present: list[bool] = []
        lost: list[ClaimRecord] = []
        for view, record, answer in zip(views, records, survived, strict=True):
            if isinstance(answer, BaseException):
                _defer(parts, report, record.uid, answer)
            elif answer:
                keep.append(record)
                present.append(view.spec_present)
            else:
                lost.append(record)
        if lost:
            down = await parts.teardowns.teardown_many(
                lost, reason="device state did not survive a reboot"
            )
            for record, error in zip(lost, down, strict=True):
                if error is not None:
                    _defer(parts, report, record.uid, error)
                    continue
                parts.pending_recovery.discard(record.uid)
                report.add("rolled-back-after-reboot", record.uid)
        written = await parts.repairs.rewrite_specs(keep, expected=True, present=present)
        revalidated: list[tuple[ClaimRecord, SpecStamp | None]] = []
        for record, stamp in zip(keep, written, strict=True):
            if isinstance(stamp, BaseException):
                _defer(parts, report, record.uid, stamp)
                continue
            parts.pending_recovery.discard(record.uid)
            revalidated.append((record, stamp))
            report.add("revalidated-after-reboot", record.uid)
        if revalidated:
            await _try(parts, report, "checkpoint", lambda: parts.repairs.stamp(revalidated))


async def _retry_forever(parts: Parts) -> None:
    delay = parts.settings.recovery_retry
    while parts.pending_recovery:
        await asyncio.sleep(delay)
        report = await recover(parts, retry_later=False)
        if not report.deferred:
            log.info("deferred recovery finished")
            return
        delay = min(RETRY_MAX, delay * 2)


async def _refuse_lost_store(parts: Parts) -> None:
    """``CheckpointCorruptError`` when opening would create a new, empty store on a
    node that shows prepared claims of this driver (its CDI specs, devices its backend
    holds): the store was there and is gone (the marker, when there, says so at open)."""
    settings = parts.settings
    if not await asyncio.to_thread(_opening_creates, settings.store_path, settings.checkpoint_path):
        return
    specs = await asyncio.to_thread(parts.specs.scan)
    in_use = await parts.backend.devices_in_use()
    if specs or in_use:
        raise errors.CheckpointCorruptError(
            str(settings.store_path),
            f"is missing, but {len(specs)} CDI specs and {len(in_use)} devices in use of "
            "this driver on the node show claims were prepared: its records were lost",
        )


def _opening_creates(store: Path, legacy: Path) -> bool:
    """Whether opening the store would create it: no database, no ``checkpoint.json``
    to take over, and no sign a store was lost (opening says why then)."""
    if os.path.lexists(store) or os.path.lexists(legacy):
        return False
    return not storefiles.damage(store)


async def accept_lost_store(parts: Parts) -> RecoveryReport:
    """An operator says the records are lost for good: an unusable or missing store is
    kept aside and a new one started (nothing changes when the store is fine); then
    recovery runs, which removes what the node still holds of the lost claims as it
    does any orphan (their spec files removed, their devices released)."""
    try:
        await _refuse_lost_store(parts)
        await asyncio.to_thread(parts.store.open)
    except errors.CheckpointCorruptError as exc:
        kept = parts.store.keep_aside(exc.path)
        await asyncio.to_thread(parts.store.reset)
        parts.mode.fail_closed = ""
        log.warning("claim records accepted as lost: %s (copy kept at %s)", exc.reason, kept)
        report = await recover(parts)
        report.actions.insert(0, ("lost-store-accepted", f"{exc.reason} (copy kept at {kept})"))
        return report
    return await recover(parts)


async def _recover_corrupt(
    parts: Parts, exc: errors.CheckpointCorruptError, report: RecoveryReport
) -> RecoveryReport:
    kept = parts.store.keep_aside(exc.path)
    parts.metrics.checkpoint_errors.labels("corrupt").inc()
    specs = parts.specs.scan()
    in_use = await parts.backend.devices_in_use()
    if not specs and not in_use:
        # Provably nothing is prepared on this node: starting empty loses nothing.
        await asyncio.to_thread(parts.store.reset)
        report.add("corrupt-checkpoint-reset", f"{exc.reason} (copy kept at {kept})")
        log.error(
            "checkpoint was unusable (%s); nothing was prepared, so it was reset; copy at %s",
            exc.reason,
            kept,
        )
        return report
    parts.mode.fail_closed = f"{exc} (copy kept at {kept}); {lost_store_hint(len(specs))}"
    report.fail_closed = parts.mode.fail_closed
    log.error("failing closed: %s", parts.mode.fail_closed)
    return report


async def collect_stale(
    parts: Parts, *, now: float | None = None, force: bool = False
) -> list[str]:
    """Unprepare claims whose ResourceClaim is gone, replaced or no longer ours.

    A claim must look stale for ``stale_claim_grace`` seconds first: the kubelet
    normally unprepares on its own, and this only covers what it lost track of.
    Also retries pending finalizer removals. Returns the UIDs cleaned up.
    """
    with gcpause.paused():  # every record decoded and every claim read at once
        return await _collect_stale(parts, now=now, force=force)


async def _collect_stale(parts: Parts, *, now: float | None, force: bool) -> list[str]:
    if parts.mode.fail_closed or isinstance(parts.calls.claims, calls.NoClaimSource):
        return []  # without the API, nothing can be proven stale
    current = time.monotonic() if now is None else now
    records = sorted((await asyncio.to_thread(parts.store.snapshot)).checkpoint.claims.items())
    refs = {uid: ClaimRef(ClaimUID(uid), r.namespace, r.name) for uid, r in records}
    # Read concurrently (bounded by the API limit); a claim that cannot be read now is
    # simply not proven stale in this pass.
    wanted = [refs[uid] for uid, r in records if r.state != ClaimState.RELEASED]
    served = await each(wanted, parts.calls.get_claim, limit=parts.settings.max_parallel_api_calls)
    claims = iter(served)
    released: list[str] = []
    stale_now: list[tuple[str, str]] = []
    for uid, record in records:
        if record.state == ClaimState.RELEASED:
            released.append(uid)
            continue
        claim = next(claims)
        if isinstance(claim, BaseException):
            if isinstance(claim, BaseException) and errors.goes_up(claim):
                raise claim
            log.warning("could not read claim %s for stale-claim cleanup: %s", uid, claim)
            continue
        stale = plan_stale(
            record, claim, driver=parts.settings.driver_name, pool=parts.settings.pool_name
        )
        if stale is None:
            parts.stale_since.pop(uid, None)
            continue
        first_seen = parts.stale_since.setdefault(uid, current)
        if force or current - first_seen >= parts.settings.stale_claim_grace:
            stale_now.append((uid, stale.message))

    # Finalizer removals still to retry run concurrently, each under its own lock; stale
    # claims go down in groups (``teardown_many``: one commit per step for a group).
    slots = asyncio.Semaphore(parts.settings.max_parallel_claims)

    async def retry_release(uid: str) -> None:
        async with slots, parts.store.claim_lock(uid):
            view = await parts.observer.one(uid)
            for step in plan.plan_repair(view):
                await parts.repairs.run_step(step, view, reason="finalizer removal retried")

    async def clean_all() -> list[str | BaseException]:
        size = parts.settings.max_parallel_claims
        found: list[str | BaseException] = []
        for start in range(0, len(stale_now), size):
            group = stale_now[start : start + size]
            try:
                found += await _clean(parts, group)
            except Exception as exc:  # noqa: BLE001 - e.g. a lock file that cannot be opened
                found += [exc] * len(group)
        return found

    retried, cleaned_or_not = await asyncio.gather(
        asyncio.gather(*(retry_release(uid) for uid in released), return_exceptions=True),
        clean_all(),
    )
    outcomes = [*retried, *cleaned_or_not]
    cleaned: list[str] = []
    subjects = [*released, *(uid for uid, _ in stale_now)]
    for uid, outcome in zip(subjects, outcomes, strict=True):
        if isinstance(outcome, BaseException) and errors.goes_up(outcome):
            raise outcome
        if isinstance(outcome, BaseException):
            # That claim alone: it stays recorded and is tried again next pass.
            log.warning("stale-claim cleanup of %s failed: %s", uid, outcome)
        elif outcome:
            cleaned.append(outcome)
    return cleaned


async def _clean(parts: Parts, group: Sequence[tuple[str, str]]) -> list[str | BaseException]:
    """Unprepare a group of stale claims (UID, why) under their locks, together; each
    claim's UID once it is down, "" when it had no record any more, or its error."""
    uids = [uid for uid, _ in group]
    found: list[str | BaseException] = [""] * len(group)
    going: list[int] = []
    async with parts.store.claim_locks(uids):
        views = await parts.observer.group(uids)
        for index, ((uid, why), view) in enumerate(zip(group, views, strict=True)):
            if isinstance(view, BaseException):
                found[index] = view
            elif view.record is not None:
                record = view.record
                log.warning(
                    "cleaning up stale claim: %s",
                    why,
                    extra={"claim_uid": uid, "claim": f"{record.namespace}/{record.name}"},
                )
                going.append(index)
        down = await parts.teardowns.teardown_many(
            [_record_of(views[i]) for i in going],
            reason=[f"stale: {group[i][1]}" for i in going],
        )
    for index, error in zip(going, down, strict=True):
        uid = uids[index]
        if error is not None:
            found[index] = error
            continue
        found[index] = uid
        parts.stale_since.pop(uid, None)
        parts.metrics.stale_claim_cleanups.inc()
    return found


def _record_of(view: ClaimView | BaseException) -> ClaimRecord:
    assert not isinstance(view, BaseException)
    assert view.record is not None
    return view.record


async def fix(parts: Parts, findings: Sequence[Finding]) -> RecoveryReport:
    """``dralet audit --fix``: the findings' planned steps, through recovery's own code."""
    report = await recover(parts)
    if report.fail_closed:
        return report
    if any(f.action == plan.Action.UNPREPARE_STALE for f in findings):
        for uid in await collect_stale(parts, force=True):
            report.add("stale-claim-unprepared", uid)
    await _execute(parts, steps_of(findings, by=frozenset({BY_FIX})), report)
    return report
