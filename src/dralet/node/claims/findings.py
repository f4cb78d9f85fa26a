"""The whole node observed and planned: recovery at start, stale-claim cleanup,
fail-closed handling and ``dralet audit``.

``take_snapshot`` reads everything, changing nothing: records, CDI specs, the backend,
the API. ``plan_node`` turns it into ``Finding``s, each a planned step not yet
executed: its ``action`` is what ``--fix`` (and, for ``by="start"`` and
``by="cleanup"``, the next start or the stale-claim loop) executes through the engine.
A claim's own steps are planned by ``plan``'s rules, which these reuse.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dralet import errors
from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.cdi import store as cdi_store
from dralet.checkpoint import database
from dralet.checkpoint.database import Snapshot
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState
from dralet.node.backend import ClaimBackend, ClaimRef, ClaimUID
from dralet.node.claims import calls, records
from dralet.node.claims.calls import Invoker, held_devices, normalize
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.claims.plan import Action, ClaimView, plan_repair, rewrite_spec
from dralet.node.settings import DriverSettings

__all__ = [
    "ACCEPT_LOST_STORE",
    "BY_CLEANUP",
    "BY_FIX",
    "BY_START",
    "ClaimLister",
    "Finding",
    "NodeSnapshot",
    "lost_store_hint",
    "plan_node",
    "plan_stale",
    "read_boot_id",
    "steps_of",
    "take_snapshot",
]


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
        await invoker.restore_held(lambda: held_devices(checkpoint))
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


ACCEPT_LOST_STORE = "dralet audit --fix --accept-lost-store"
"""How an operator says the claim records are lost for good (``nodewide.accept_lost_store``)."""


def lost_store_hint(specs: int) -> str:
    """What an operator reads on a node failing closed: what works and how to go on."""
    return (
        f"{specs} claims still have CDI specs and are unprepared from them; new prepares "
        "resume once the node holds nothing of this driver and it restarts, or after "
        f"`{ACCEPT_LOST_STORE} --driver NAME` (the records are lost for good: the rest "
        "of their claims is then removed from the node)"
    )


BY_START = "start"
BY_CLEANUP = "cleanup"
BY_FIX = "fix"
_BY: dict[Action, str] = {
    Action.ROLL_BACK: BY_START,
    Action.FINISH_UNPREPARE: BY_START,
    Action.RETRY_FINALIZER_REMOVAL: BY_START,
    Action.REWRITE_SPEC: BY_START,
    Action.REVALIDATE: BY_START,
    Action.REMOVE_ORPHAN_SPEC: BY_START,
    Action.RELEASE_ORPHAN_DEVICE: BY_START,
    Action.RESET_CHECKPOINT: BY_START,
    Action.UNPREPARE_STALE: BY_CLEANUP,
    Action.RESTORE_FINALIZER: BY_FIX,
    Action.REMOVE_FOREIGN_FINALIZER: BY_FIX,
}
_REPAIR_TEXT: dict[Action, str] = {
    Action.ROLL_BACK: "roll back (release devices, remove spec)",
    Action.FINISH_UNPREPARE: "finish the unprepare",
    Action.RETRY_FINALIZER_REMOVAL: "remove the finalizer",
    Action.REWRITE_SPEC: "rewrite the spec from the checkpoint",
    Action.REVALIDATE: "revalidate the devices after the reboot",
    Action.REMOVE_ORPHAN_SPEC: "remove the spec file and device metadata files",
    Action.RELEASE_ORPHAN_DEVICE: "release the device",
    Action.UNPREPARE_STALE: "unprepare the claim",
    Action.RESTORE_FINALIZER: "add the finalizer",
    Action.REMOVE_FOREIGN_FINALIZER: "remove the finalizer",
    Action.RESET_CHECKPOINT: "reset the checkpoint (nothing is prepared; a copy is kept)",
}


@dataclass(frozen=True)
class Finding:
    kind: str
    """What is inconsistent: ``corrupt-checkpoint``, ``orphan-spec``, ``invalid-spec``,
    ``missing-spec``, ``half-prepared``, ``half-unprepared``, ``finalizer-pending``,
    ``not-revalidated``, ``device-held-twice``, ``orphan-device``, ``device-not-held``,
    ``claim-gone``, ``claim-replaced``, ``claim-moved``, ``claim-deleted-unused``,
    ``orphan-metadata``,
    ``prepared-without-finalizer``, ``finalizer-without-claim``."""
    subject: str
    """The claim UID, device (``pool/device`` or backend name) or ``checkpoint``."""
    message: str
    """One sentence for a person."""
    repair: str = ""
    """What ``--fix`` does about it; empty when it needs a person."""
    namespace: str = ""
    name: str = ""
    action: str = ""
    """The planned ``Action`` (empty: needs a person)."""
    by: str = ""
    """Who repairs it unasked: ``start``, ``cleanup`` (stale-claim loop) or ``fix`` only."""


def _finding(kind: str, subject: str, message: str, action: Action | None, **extra: str) -> Finding:
    if action is None:
        return Finding(kind, subject, message, **extra)
    return Finding(
        kind, subject, message, _REPAIR_TEXT[action], action=action.value, by=_BY[action], **extra
    )


def _spec_action(record: ClaimRecord | None) -> Action | None:
    if record is None:
        return Action.REMOVE_ORPHAN_SPEC
    if record.state == ClaimState.PREPARE_COMPLETED:
        return next(iter(rewrite_spec(record, spec_present=False)), None)
    # The interrupted work's own step (roll back, finish unprepare) removes the spec.
    return next(iter(plan_repair(ClaimView(record.uid, record, spec_present=True))), None)


def _spec_problem(
    uid: str, document: Mapping[str, Any] | str, *, cdi_kind: str, record: ClaimRecord | None
) -> str | None:
    if isinstance(document, str):
        return f"CDI spec for claim {uid} is {document}"
    if (
        record is not None
        and record.cdi_spec is not None
        and (document is record.cdi_spec or document == record.cdi_spec)
    ):
        return None  # exactly the spec the engine built, checked and recorded
    try:
        parsed = cdi_spec.from_json(document)
    except (cdi_spec.CDISpecError, cdi_names.CDINameError) as exc:
        return f"CDI spec for claim {uid} is invalid: {exc}"
    if parsed.kind != cdi_kind:
        return f"CDI spec for claim {uid} has kind {parsed.kind}, not {cdi_kind}"
    if record is not None and record.state == ClaimState.PREPARE_COMPLETED:
        defined = set(parsed.qualified_names())
        missing = sorted({i for d in record.devices for i in d.cdi_device_ids} - defined)
        if missing:
            return (
                f"CDI spec for claim {uid} does not define {', '.join(missing)} "
                "(the CDI devices the kubelet was given)"
            )
        if record.cdi_spec is not None:
            # Valid, but not what dralet wrote: the record is the truth.
            return f"CDI spec for claim {uid} differs from the one its record holds"
    return None


def _corrupt_checkpoint(snapshot: NodeSnapshot) -> Finding:
    in_use = snapshot.in_use or {}
    if snapshot.specs or in_use:
        message = (
            f"{snapshot.checkpoint_error}; {len(snapshot.specs)} CDI specs and "
            f"{len(in_use)} backend devices in use prove claims are prepared: "
            "the driver fails closed (if the records are lost for good: "
            f"{ACCEPT_LOST_STORE} --driver NAME)"
        )
        return _finding("corrupt-checkpoint", "checkpoint", message, None)
    found = _finding(
        "corrupt-checkpoint", "checkpoint", snapshot.checkpoint_error, Action.RESET_CHECKPOINT
    )
    if snapshot.in_use is None:
        repair = "reset the checkpoint if the backend holds no device (a copy is kept)"
        return Finding(**{**found.__dict__, "repair": repair})
    return found


_RECORD_FINDINGS: dict[Action, tuple[str, str]] = {
    Action.ROLL_BACK: ("half-prepared", "prepare never completed"),
    Action.FINISH_UNPREPARE: ("half-unprepared", "unprepare never completed"),
    Action.RETRY_FINALIZER_REMOVAL: (
        "finalizer-pending",
        "unprepared (the kubelet has its answer), finalizer removal owed",
    ),
    Action.REVALIDATE: ("not-revalidated", "prepared before a reboot, not revalidated since"),
}


def plan_node(snapshot: NodeSnapshot) -> list[Finding]:
    """Every inconsistency in ``snapshot`` with the step that repairs it, in a stable order."""
    if snapshot.checkpoint is None:
        return [_corrupt_checkpoint(snapshot)]
    found: list[Finding] = [
        # Its CDI spec, devices and finalizer are left as they are: the kubelet's
        # unprepare releases them from what the CDI dir and the backend prove.
        _finding("corrupt-record", uid, why, None)
        for uid, why in sorted(snapshot.corrupt.items())
    ]
    records = snapshot.checkpoint.claims
    for uid, document in sorted(snapshot.specs.items()):
        if uid in snapshot.corrupt:
            continue
        record = records.get(uid)
        problem = _spec_problem(uid, document, cdi_kind=snapshot.cdi_kind, record=record)
        if problem is not None:
            found.append(_finding("invalid-spec", uid, problem, _spec_action(record)))
        if record is None:
            found.append(
                _finding(
                    "orphan-spec",
                    uid,
                    f"CDI spec for claim {uid} has no checkpoint record",
                    Action.REMOVE_ORPHAN_SPEC,
                )
            )
    for uid in sorted(snapshot.metadata - set(records) - set(snapshot.corrupt)):
        if uid not in snapshot.specs:  # else its orphan-spec step removes both
            found.append(
                _finding(
                    "orphan-metadata",
                    uid,
                    f"device metadata files for claim {uid} have no checkpoint record",
                    Action.REMOVE_ORPHAN_SPEC,
                )
            )
    holders: dict[tuple[str, str, str], list[str]] = {}
    for uid, record in sorted(records.items()):
        spec_present = uid in snapshot.specs
        view = ClaimView(uid, record, spec_present=spec_present, boot_id=snapshot.boot_id)
        actions = plan_repair(view)
        for action in actions:
            if action in _RECORD_FINDINGS:
                kind, what = _RECORD_FINDINGS[action]
                where = f"{record.namespace}/{record.name}"
                found.append(_finding(kind, uid, f"claim {where}: {what}", action))
        # A claim revalidated after a reboot gets its spec rewritten by that same step.
        if (
            not spec_present
            and record.state == ClaimState.PREPARE_COMPLETED
            and Action.REVALIDATE not in actions
        ):
            found.append(
                _finding(
                    "missing-spec",
                    uid,
                    f"prepared claim {record.namespace}/{record.name} has no CDI spec",
                    next(iter(rewrite_spec(record, spec_present=False)), None),
                )
            )
        if record.holds_devices:
            for d in record.devices:
                held = d.allocated
                if not held.admin_access:
                    key = (held.pool, held.device, held.share_id)
                    holders.setdefault(key, []).append(uid)
    for (pool, device, _), uids in sorted(holders.items()):
        if len(uids) > 1:
            found.append(
                _finding(
                    "device-held-twice",
                    f"{pool}/{device}",
                    f"device {pool}/{device} is recorded for claims {', '.join(uids)}",
                    None,
                )
            )
    if snapshot.in_use is not None:
        found.extend(_backend_findings(snapshot, records, holders))
    if snapshot.claims is not None:
        found.extend(_api_findings(snapshot, records))
    return found


def _backend_findings(
    snapshot: NodeSnapshot,
    records: Mapping[str, ClaimRecord],
    holders: Mapping[tuple[str, str, str], list[str]],
) -> list[Finding]:
    assert snapshot.in_use is not None
    found: list[Finding] = []
    recorded = {
        (device, uid)
        for (pool, device, _), uids in holders.items()
        for uid in uids
        if pool == snapshot.pool
    }
    in_use = sorted((device, uid) for device, uids in snapshot.in_use.items() for uid in uids)
    for device, uid in in_use:
        if (device, uid) not in recorded and uid not in snapshot.corrupt:
            found.append(
                _finding(
                    "orphan-device",
                    device,
                    f"device {device} is in use by claim {uid} with no checkpoint record",
                    Action.RELEASE_ORPHAN_DEVICE,
                )
            )
    for device, uid in sorted(recorded):
        record = records[uid]
        if record.state == ClaimState.PREPARE_COMPLETED and uid not in snapshot.in_use.get(
            device, ()
        ):
            found.append(
                _finding(
                    "device-not-held",
                    device,
                    f"claim {uid} is recorded as prepared but the backend does not hold {device}",
                    None,
                )
            )
    return found


def plan_stale(
    record: ClaimRecord, claim: Mapping[str, Any] | None, *, driver: str, pool: str
) -> Finding | None:
    """A recorded claim as the API serves it (``claim``; None: gone): its
    ``UNPREPARE_STALE`` finding when it is gone, replaced or no longer this driver's."""
    ref = ClaimRef(ClaimUID(record.uid), record.namespace, record.name)
    stale = records.staleness(claim, ref, driver=driver, pool=pool)
    if stale is None:
        return None
    return _finding(f"claim-{stale.kind}", record.uid, stale.message, Action.UNPREPARE_STALE)


def _api_findings(snapshot: NodeSnapshot, records: Mapping[str, ClaimRecord]) -> list[Finding]:
    assert snapshot.claims is not None
    found: list[Finding] = []
    finalizer = calls.finalizer_name(snapshot.driver)
    by_name = {
        (c.get("metadata", {}).get("namespace", ""), c.get("metadata", {}).get("name", "")): c
        for c in snapshot.claims
    }
    for uid, record in sorted(records.items()):
        claim = by_name.get((record.namespace, record.name))
        stale = plan_stale(record, claim, driver=snapshot.driver, pool=snapshot.pool)
        if stale is not None:
            found.append(stale)
            continue
        assert claim is not None
        has_finalizer = finalizer in (claim.get("metadata", {}).get("finalizers") or [])
        if record.state == ClaimState.PREPARE_COMPLETED and not has_finalizer:
            found.append(
                _finding(
                    "prepared-without-finalizer",
                    uid,
                    f"prepared claim {record.namespace}/{record.name} lacks the "
                    f"{finalizer} finalizer",
                    Action.RESTORE_FINALIZER,
                )
            )
    for (namespace, name), claim in sorted(by_name.items()):
        uid = claim.get("metadata", {}).get("uid", "")
        if (
            finalizer in (claim.get("metadata", {}).get("finalizers") or [])
            and uid not in records
            and uid not in snapshot.corrupt
        ):
            found.append(
                _finding(
                    "finalizer-without-claim",
                    uid,
                    f"ResourceClaim {namespace}/{name} carries {finalizer} "
                    "but is not prepared here",
                    Action.REMOVE_FOREIGN_FINALIZER,
                    namespace=namespace,
                    name=name,
                )
            )
    return found


def steps_of(findings: Sequence[Finding], *, by: frozenset[str]) -> list[Finding]:
    """The findings whose step the given repairers execute."""
    return [f for f in findings if f.action and f.by in by]
