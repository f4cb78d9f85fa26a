"""Read what is true now, changing nothing: records, CDI specs, the backend, the API.

``take_snapshot`` reads the whole node (recovery at start, ``dralet audit``);
``ClaimView`` is one claim's slice of it, read again under the claim's lock before the
engine acts (``Observer``: every claim observed in the same turn of the event loop
read in one query, its files looked up together). Fail-closed status and the
current boot ID travel in the snapshot, so the planner decides on them like on
anything else it observes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dralet import errors
from dralet.cdi import store as cdi_store
from dralet.checkpoint import database
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import Checkpoint, ClaimRecord
from dralet.node.backend import ClaimBackend
from dralet.node.batches import settle_future
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.claims.store import RecordStore
from dralet.node.invoke import Invoker, held_devices, normalize
from dralet.node.settings import DriverSettings
from dralet.node.tasks import TaskSet

__all__ = [
    "ClaimLister",
    "ClaimView",
    "Mode",
    "NodeSnapshot",
    "Observer",
    "artifacts_present",
    "read_boot_id",
    "take_snapshot",
]

INLINE_CHECKS = 8
"""Claims observed together whose files are checked on the event loop; more go to a
worker thread together."""


class ClaimLister(Protocol):
    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        """Every ResourceClaim in the cluster (all namespaces), as JSON dicts."""
        ...


@dataclass(frozen=True)
class NodeSnapshot:
    driver: str
    pool: str
    cdi_kind: str
    checkpoint: Checkpoint | None
    checkpoint_error: str = ""
    specs: Mapping[str, Mapping[str, Any] | str] = field(default_factory=dict)
    """Claim UID → spec document, or the reason it could not be read/parsed."""
    in_use: Mapping[str, frozenset[str]] | None = None
    """Backend device → the claim UIDs holding it; None when the backend was not consulted."""
    claims: Sequence[Mapping[str, Any]] | None = None
    """ResourceClaims from the API; None when the API was not consulted."""
    boot_id: str = ""
    """The node's boot ID now; empty when unknown (no reboot is assumed)."""
    corrupt: Mapping[str, str] = field(default_factory=dict)
    """Claim UID → why its record cannot be trusted (that claim alone fails closed)."""
    metadata: frozenset[str] = frozenset()
    """Claim UIDs that have device metadata files."""


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


def read_boot_id(settings: DriverSettings) -> str:
    try:
        return settings.boot_id_path.read_text().strip()
    except OSError:
        return ""


def _read_specs(
    store: cdi_store.SpecStore, known: Mapping[str, ClaimRecord] | None = None
) -> dict[str, Mapping[str, Any] | str]:
    """Every spec file's document (or why it is unreadable). With ``known`` records, a
    file whose stamp is the one its record wrote is that record's ``cdi_spec`` and is not
    read again (only recovery trusts stamps; the audit reads every file)."""
    specs: dict[str, Mapping[str, Any] | str] = {}
    for spec_file in store.scan(stamps=known is not None):
        record = known.get(spec_file.claim_uid) if known is not None else None
        if (
            record is not None
            and record.cdi_spec is not None
            and record.cdi_spec_stamp is not None
            and spec_file.stamp == record.cdi_spec_stamp
        ):
            specs[spec_file.claim_uid] = record.cdi_spec
            continue
        try:
            specs[spec_file.claim_uid] = json.loads(spec_file.path.read_text())
        except (OSError, ValueError) as exc:
            specs[spec_file.claim_uid] = f"unreadable: {exc}"
    return specs


async def take_snapshot(
    settings: DriverSettings,
    *,
    backend: ClaimBackend | Invoker | None = None,
    claims: ClaimLister | None = None,
    records: Snapshot | None = None,
    trust_stamps: bool = False,
) -> NodeSnapshot:
    """Everything the planner needs about the node; ``records`` skips reading them again
    (without it they are read without writing anything, as ``dralet audit`` must);
    ``trust_stamps`` skips reading spec files that are as their records wrote them."""
    store = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
    checkpoint_error = ""
    checkpoint: Checkpoint | None = None
    corrupt: Mapping[str, str] = {}
    try:
        if records is None:
            records = database.read_only_snapshot(settings.store_path, settings.checkpoint_path)
        checkpoint, corrupt = records.checkpoint, records.corrupt
    except errors.CheckpointCorruptError as exc:
        checkpoint_error = str(exc)
    invoker = normalize(backend) if backend is not None else None
    if invoker is not None and checkpoint is not None:
        # The backend learns what the records hold before it is asked what is in use.
        await invoker.restore_held(held_devices(checkpoint))
    return NodeSnapshot(
        driver=settings.driver_name,
        pool=settings.pool_name,
        cdi_kind=settings.cdi_kind,
        checkpoint=checkpoint,
        checkpoint_error=checkpoint_error,
        specs=await asyncio.to_thread(
            _read_specs, store, checkpoint.claims if trust_stamps and checkpoint else None
        ),
        in_use=(await invoker.devices_in_use()) if invoker is not None else None,
        claims=list(await claims.list_claims()) if claims is not None else None,
        boot_id=read_boot_id(settings),
        corrupt=corrupt,
        metadata=frozenset(MetadataFiles(settings.plugin_dir).claim_uids()),
    )


def artifacts_present(
    specs: cdi_store.SpecStore, metadata: MetadataFiles, record: ClaimRecord | None, uid: str
) -> bool:
    """Whether the claim's CDI spec (and its device metadata files, if it has any) are on
    disk; for a claim without a record, whether any of them is."""
    if record is None:
        return specs.exists(uid) or metadata.has_any(uid)
    if not specs.exists(uid):
        return False
    return metadata.present(uid, list(record.device_metadata))


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
