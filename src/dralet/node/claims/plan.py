"""One claim's observation and plan: what is true of it now, read under its lock and
changing nothing, and what to do about it (pure).

``Observer`` reads every claim observed in the same turn of the event loop in one query
and looks up their files together; a ``ClaimView`` is what it saw, with the boot ID and
fail-closed status, so the planner decides on them like on anything else observed. The
``plan_*`` functions turn a view into ``Action``s that prepare, teardown and the repairs
execute. The whole node's observation and plan (recovery, stale claims, ``dralet
audit``) is ``findings``'s, over the same rules.
"""

from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dralet import errors
from dralet.batches import settle_future
from dralet.cdi import store as cdi_store
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.claims.store import RecordStore
from dralet.tasks import TaskSet

__all__ = [
    "Action",
    "ClaimView",
    "Mode",
    "Observer",
    "artifacts_present",
    "metadata_on_node",
    "plan_prepare",
    "plan_repair",
    "plan_unprepare",
    "rewrite_spec",
]


class Action(enum.StrEnum):
    """A step the engine can execute (``repairs.Repairs.run_step``)."""

    ROLL_BACK = "roll-back"
    FINISH_UNPREPARE = "finish-unprepare"
    RETRY_FINALIZER_REMOVAL = "retry-finalizer-removal"
    REWRITE_SPEC = "rewrite-spec"
    REVALIDATE = "revalidate-after-reboot"
    REMOVE_ORPHAN_SPEC = "remove-orphan-spec"
    RELEASE_ORPHAN_DEVICE = "release-orphan-device"
    UNPREPARE_STALE = "unprepare-stale"
    RESTORE_FINALIZER = "restore-finalizer"
    REMOVE_FOREIGN_FINALIZER = "remove-foreign-finalizer"
    RESET_CHECKPOINT = "reset-checkpoint"
    # Only on the RPC paths:
    PREPARE = "prepare"
    ANSWER_PREPARED = "answer-prepared"
    REFUSE = "refuse"
    UNPREPARE = "unprepare"
    UNPREPARE_FROM_PROOF = "unprepare-from-proof"


@dataclass
class Mode:
    """Serving (``fail_closed`` empty) or failing closed: the checkpoint is not trusted,
    new prepares are refused, unprepare works from what the CDI dir and backend prove.
    One per engine, changed in place (every part that reads it sees the change)."""

    fail_closed: str = ""


@dataclass(frozen=True)
class ClaimView:
    """One claim as observed under its lock."""

    uid: str
    record: ClaimRecord | None
    spec_present: bool
    boot_id: str = ""
    fail_closed: str = ""

    @property
    def rebooted(self) -> bool:
        record = self.record
        return (
            record is not None
            and bool(record.boot_id)
            and bool(self.boot_id)
            and record.boot_id != self.boot_id
        )


def plan_repair(view: ClaimView) -> list[Action]:
    """What recovery does about one recorded claim (also the start of every RPC path)."""
    record = view.record
    if record is None:
        return [Action.REMOVE_ORPHAN_SPEC] if view.spec_present else []
    if record.state == ClaimState.PREPARE_STARTED:
        return [Action.ROLL_BACK]
    if record.state == ClaimState.UNPREPARE_STARTED:
        return [Action.FINISH_UNPREPARE]
    if record.state == ClaimState.RELEASED:
        return [Action.RETRY_FINALIZER_REMOVAL]
    if view.rebooted:
        return [Action.REVALIDATE]
    return rewrite_spec(record, spec_present=view.spec_present)


def rewrite_spec(record: ClaimRecord, *, spec_present: bool) -> list[Action]:
    """The one rule for a prepared claim's spec: rewritten from its record when the file
    is missing or unusable (``spec_present`` False) and the record holds the spec."""
    return [] if spec_present or record.cdi_spec is None else [Action.REWRITE_SPEC]


def plan_prepare(view: ClaimView) -> list[Action]:
    record = view.record
    if record is not None and record.state == ClaimState.PREPARE_COMPLETED:
        steps = rewrite_spec(record, spec_present=view.spec_present)
        return [*steps, Action.ANSWER_PREPARED]
    steps = plan_repair(view)
    return [*steps, Action.REFUSE if view.fail_closed else Action.PREPARE]


def plan_unprepare(view: ClaimView) -> list[Action]:
    if view.fail_closed:
        return [Action.UNPREPARE_FROM_PROOF]
    if view.record is None:
        return [Action.REMOVE_ORPHAN_SPEC] if view.spec_present else []
    return [Action.UNPREPARE]


INLINE_CHECKS = 8
"""Claims observed together whose files are checked on the event loop; more go to a
worker thread together."""


def artifacts_present(
    specs: cdi_store.SpecStore, metadata: MetadataFiles, record: ClaimRecord | None, uid: str
) -> bool:
    """Whether the claim's CDI spec (and its device metadata files, if it has any) are on
    disk; for a claim without a record, whether any of them is."""
    if record is None:
        return specs.exists(uid) or (metadata_on_node(metadata) and metadata.has_any(uid))
    if not specs.exists(uid):
        return False
    return not record.device_metadata or metadata.present(uid, list(record.device_metadata))


def metadata_on_node(metadata: MetadataFiles) -> bool:
    """Whether any claim may have device metadata files: none can while their folder is
    missing, as on every node that never turned them on."""
    return os.path.lexists(metadata.root)


_Seen = tuple[str, ClaimRecord | None, str]
"""A claim's UID, its record (None: none, or not trusted) and why it fails closed."""


class Observer:
    """Claims as they are now: call with their locks held. Never writes.

    A record that fails its checksum makes that claim alone fail closed; a store that
    cannot be read at all makes the whole node fail closed (``corrupt`` hears of it).
    """

    def __init__(
        self,
        store: RecordStore,
        specs: cdi_store.SpecStore,
        metadata: MetadataFiles,
        work: TaskSet,
        *,
        mode: Mode,
        corrupt: Callable[[errors.CheckpointCorruptError], None],
    ) -> None:
        self.store = store
        self.specs = specs
        self.metadata = metadata
        self.work = work
        self.mode = mode
        self._corrupt = corrupt
        self._pending: list[tuple[str, asyncio.Future[ClaimView]]] = []

    async def one(self, uid: str) -> ClaimView:
        """``group`` of one claim, observed with the others observed in the same turn of
        the event loop (recovery observes each of 10,000 claims under its own lock)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ClaimView] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._observe_pending)
        self._pending.append((uid, future))
        return await future

    async def group(
        self, uids: Sequence[str], *, known: Snapshot | None = None
    ) -> list[ClaimView | BaseException]:
        """The claims, their records read in one query (rows unchanged since the snapshot
        ``known`` are not decoded again) and their files checked together (a few inline,
        more in one worker thread); a view each, or the error of checking its files."""
        seen = self._read(uids, known)
        if len(seen) <= INLINE_CHECKS:
            return self._views(seen)
        return await asyncio.to_thread(self._views, seen)

    def _read(self, uids: Sequence[str], known: Snapshot | None) -> list[_Seen]:
        found: Mapping[str, tuple[ClaimRecord | None, str]] = {}
        if not self.mode.fail_closed:
            try:
                found = self.store.records_now(uids, known=known)
            except errors.CheckpointCorruptError as exc:
                self._corrupt(exc)
        return [(uid, *found.get(uid, (None, self.mode.fail_closed))) for uid in uids]

    def _views(self, seen: Sequence[_Seen]) -> list[ClaimView | BaseException]:
        views: list[ClaimView | BaseException] = []
        for uid, record, fail_closed in seen:
            try:
                present = artifacts_present(self.specs, self.metadata, record, uid)
            except Exception as exc:  # noqa: BLE001 - that claim's observation fails
                views.append(exc)
                continue
            views.append(
                ClaimView(
                    uid,
                    record,
                    spec_present=present,
                    boot_id=self.store.boot_id,
                    fail_closed=fail_closed,
                )
            )
        return views

    def _observe_pending(self) -> None:
        pending, self._pending = self._pending, []
        try:
            seen = self._read([uid for uid, _ in pending], None)
        except Exception as exc:  # noqa: BLE001 - every claim observed gets the store's error
            self._answer(pending, [exc] * len(pending))
            return
        if len(seen) <= INLINE_CHECKS:
            self._answer(pending, self._views(seen))
        else:
            self.work.spawn("file-checks", self._views_in_thread(pending, seen))

    async def _views_in_thread(
        self, pending: Sequence[tuple[str, asyncio.Future[ClaimView]]], seen: Sequence[_Seen]
    ) -> None:
        try:
            views = await asyncio.to_thread(self._views, seen)
        except BaseException as exc:  # cancelled, or no thread to run it: every claim gets it
            self._answer(pending, [exc] * len(pending))
            raise
        self._answer(pending, views)

    @staticmethod
    def _answer(
        pending: Sequence[tuple[str, asyncio.Future[ClaimView]]],
        views: Sequence[ClaimView | BaseException],
    ) -> None:
        for (_, future), view in zip(pending, views, strict=True):
            settle_future(future, view)
