"""Repairs: the steps recovery at start, stale-claim cleanup and ``dralet audit --fix``
take besides prepare and teardown (the claim's lock is held by the caller).

``run_step`` executes one ``plan.Action`` for one claim; the others fix what the
node-wide plan found: orphan files and devices, finalizers, specs that vanished,
claims prepared before a reboot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from dralet.cdi import store as cdi_store
from dralet.checkpoint.database import Stamp
from dralet.checkpoint.model import ClaimRecord, ClaimState, evolve
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims import plan
from dralet.node.claims.group import Route, RouteParts, only, ref_of
from dralet.node.claims.plan import ClaimView
from dralet.node.claims.records import now_stamp
from dralet.node.claims.teardown import Teardown

__all__ = ["Repairs"]

log = logging.getLogger("dralet.node.claims")


class Repairs(Route):
    """The repair steps; every method expects the claims' locks held."""

    def __init__(
        self, parts: RouteParts, *, specs: cdi_store.SpecStore, teardown: Teardown
    ) -> None:
        super().__init__(parts)
        self.specs = specs
        self.teardown = teardown

    async def run_step(self, action: plan.Action, view: ClaimView, *, reason: str) -> str:
        """Execute one planned step for a claim whose lock is held; returns the report
        action name ('' when there was nothing left to do)."""
        record = view.record
        if action is plan.Action.REMOVE_ORPHAN_SPEC:
            if record is not None:
                return ""
            removed = await self.remove_orphan_artifacts(view.uid)
            if removed:
                self.metrics.recovery_actions.labels(removed).inc()
            return removed
        if record is None:
            return ""
        if action is plan.Action.REWRITE_SPEC:
            return "spec-rewritten" if await self.rewrite_spec(record) else ""
        names = {
            plan.Action.ROLL_BACK: "prepare-rolled-back",
            plan.Action.FINISH_UNPREPARE: "unprepare-finished",
            plan.Action.RETRY_FINALIZER_REMOVAL: "finalizer-retried",
            plan.Action.UNPREPARE: "unprepared",
            plan.Action.UNPREPARE_STALE: "stale-claim-unprepared",
        }
        if action not in names:
            raise ValueError(f"{action} is not a per-claim step")
        await self.teardown.teardown(record, reason=reason)
        return names[action]

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
        return only(await self.rewrite_specs([record], expected=expected))

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
                [(d.allocated, d.prepared_state) for r in records for d in r.devices]
            )
        )
        results: list[bool | BaseException] = []
        for record in records:
            mine = [next(answers) for _ in record.devices]
            error = next((a for a in mine if isinstance(a, BaseException)), None)
            results.append(error if error is not None else all(mine))
        return results

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
