"""Read what is true now, changing nothing: records, CDI specs, the backend, the API.

``take_snapshot`` reads the whole node (recovery at start, ``dralet audit``);
``ClaimView`` is one claim's slice of it, read again under the claim's lock before the
engine acts. Fail-closed status and the current boot ID travel in the snapshot, so the
planner decides on them like on anything else it observes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dralet import errors
from dralet.cdi import store as cdi_store
from dralet.checkpoint import database
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import Checkpoint, ClaimRecord
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.invoke import AnyBackend, Invoker, held_devices, normalize
from dralet.node.settings import DriverSettings

__all__ = ["ClaimLister", "ClaimView", "Mode", "NodeSnapshot", "read_boot_id", "take_snapshot"]


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


@dataclass(frozen=True)
class Mode:
    """Serving (``fail_closed`` empty) or failing closed: the checkpoint is not trusted,
    new prepares are refused, unprepare works from what the CDI dir and backend prove."""

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
    backend: AnyBackend | Invoker | None = None,
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
