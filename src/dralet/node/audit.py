"""Node audit: every inconsistency between the checkpoint, the CDI directory, the backend's
view of its devices and (when reachable) the ResourceClaims in the API.

``take_snapshot`` reads the state (I/O); ``find_inconsistencies`` is a pure function over
that snapshot; ``repair`` fixes what it found by running the ledger's own recovery and
garbage-collection paths, never a separate code path. Used by ``dralet audit`` and by the
crash suite's invariant checks.

Finding kinds: ``corrupt-checkpoint``, ``orphan-spec``, ``invalid-spec``, ``missing-spec``,
``half-prepared``, ``half-unprepared``, ``finalizer-pending``, ``device-held-twice``,
``orphan-device``, ``device-not-held`` (with the backend), ``claim-gone``,
``claim-replaced``, ``claim-moved``, ``claim-deleted-unused``, ``prepared-without-finalizer`` and
``finalizer-without-claim`` (with the API). A finding whose ``repair`` is empty needs a
person: ``repair`` does nothing about it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dralet import errors
from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.cdi import store as cdi_store
from dralet.checkpoint import store as checkpoint_store
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState
from dralet.node import claims as claim_checks
from dralet.node.backend import ClaimRef, ClaimUID, DeviceBackend
from dralet.node.ledger import Ledger, RecoveryReport
from dralet.node.settings import DriverSettings

__all__ = [
    "ClaimLister",
    "Finding",
    "NodeSnapshot",
    "find_inconsistencies",
    "repair",
    "take_snapshot",
]


REWRITE_SPEC = "rewrite the spec from the checkpoint"
STALE_CLAIM_KINDS = frozenset(
    {"claim-gone", "claim-replaced", "claim-moved", "claim-deleted-unused"}
)
"""Findings that stale-claim cleanup (``Ledger.collect_stale``) repairs."""
"""The repair of a prepared claim's missing or invalid spec."""


class ClaimLister(Protocol):
    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        """Every ResourceClaim in the cluster (all namespaces), as JSON dicts."""
        ...


@dataclass(frozen=True)
class Finding:
    kind: str
    """What is inconsistent (one of the kinds in the module docstring)."""
    subject: str
    """The claim UID, device (``pool/device`` or backend name) or ``checkpoint``."""
    message: str
    """One sentence for a person."""
    repair: str = ""
    """What ``--fix`` does about it; empty when it needs a person."""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class NodeSnapshot:
    driver: str
    pool: str
    cdi_kind: str
    checkpoint: Checkpoint | None
    checkpoint_error: str = ""
    specs: Mapping[str, Mapping[str, Any] | str] = field(default_factory=dict)
    """Claim UID → spec document, or the reason it could not be read/parsed."""
    in_use: Mapping[str, str] | None = None
    """Backend device → claim UID; None when the backend was not consulted."""
    claims: Sequence[Mapping[str, Any]] | None = None
    """ResourceClaims from the API; None when the API was not consulted."""


def _read_specs(store: cdi_store.SpecStore) -> dict[str, Mapping[str, Any] | str]:
    specs: dict[str, Mapping[str, Any] | str] = {}
    for spec_file in store.scan():
        try:
            specs[spec_file.claim_uid] = json.loads(spec_file.path.read_text())
        except (OSError, ValueError) as exc:
            specs[spec_file.claim_uid] = f"unreadable: {exc}"
    return specs


async def take_snapshot(
    settings: DriverSettings,
    *,
    backend: DeviceBackend | None = None,
    claims: ClaimLister | None = None,
) -> NodeSnapshot:
    store = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
    checkpoint: Checkpoint | None = None
    checkpoint_error = ""
    try:
        checkpoint = checkpoint_store.CheckpointStore(settings.checkpoint_path).load()
    except errors.CheckpointCorruptError as exc:
        checkpoint_error = str(exc)
    return NodeSnapshot(
        driver=settings.driver_name,
        pool=settings.pool_name,
        cdi_kind=settings.cdi_kind,
        checkpoint=checkpoint,
        checkpoint_error=checkpoint_error,
        specs=_read_specs(store),
        in_use=dict(await backend.devices_in_use()) if backend is not None else None,
        claims=list(await claims.list_claims()) if claims is not None else None,
    )


def _spec_repair(record: ClaimRecord | None) -> str:
    if record is None:
        return "remove the spec file"
    if record.state == ClaimState.PREPARE_COMPLETED and record.cdi_spec is not None:
        return REWRITE_SPEC
    if record.state != ClaimState.PREPARE_COMPLETED:
        return "remove the spec file with the interrupted work"
    return ""


def _spec_problems(
    uid: str, document: Mapping[str, Any] | str, *, cdi_kind: str, record: ClaimRecord | None
) -> list[Finding]:
    repair = _spec_repair(record)
    if isinstance(document, str):
        return [Finding("invalid-spec", uid, f"CDI spec for claim {uid} is {document}", repair)]
    try:
        parsed = cdi_spec.from_json(document)
    except (cdi_spec.CDISpecError, cdi_names.CDINameError) as exc:
        return [Finding("invalid-spec", uid, f"CDI spec for claim {uid} is invalid: {exc}", repair)]
    if parsed.kind != cdi_kind:
        return [
            Finding(
                "invalid-spec",
                uid,
                f"CDI spec for claim {uid} has kind {parsed.kind}, not {cdi_kind}",
                repair,
            )
        ]
    if record is not None and record.state == ClaimState.PREPARE_COMPLETED:
        defined = set(parsed.qualified_names())
        missing = sorted(
            {i for d in record.devices for i in d.cdi_device_ids} - defined,
        )
        if missing:
            return [
                Finding(
                    "invalid-spec",
                    uid,
                    f"CDI spec for claim {uid} does not define {', '.join(missing)} "
                    "(the CDI devices the kubelet was given)",
                    repair,
                )
            ]
    return []


def _corrupt_checkpoint(snapshot: NodeSnapshot) -> Finding:
    in_use = snapshot.in_use or {}
    if snapshot.specs or in_use:
        message = (
            f"{snapshot.checkpoint_error}; {len(snapshot.specs)} CDI specs and "
            f"{len(in_use)} backend devices in use prove claims are prepared: "
            "the driver fails closed"
        )
        return Finding("corrupt-checkpoint", "checkpoint", message, "")
    repair = "reset the checkpoint (nothing is prepared; a copy is kept)"
    if snapshot.in_use is None:
        repair = "reset the checkpoint if the backend holds no device (a copy is kept)"
    return Finding("corrupt-checkpoint", "checkpoint", snapshot.checkpoint_error, repair)


def find_inconsistencies(snapshot: NodeSnapshot) -> list[Finding]:
    """Every inconsistency in ``snapshot``, in a stable order."""
    found: list[Finding] = []
    if snapshot.checkpoint is None:
        found.append(_corrupt_checkpoint(snapshot))
        return found
    records = snapshot.checkpoint.claims
    for uid, document in sorted(snapshot.specs.items()):
        found.extend(
            _spec_problems(uid, document, cdi_kind=snapshot.cdi_kind, record=records.get(uid))
        )
        if uid not in records:
            found.append(
                Finding(
                    "orphan-spec",
                    uid,
                    f"CDI spec for claim {uid} has no checkpoint record",
                    "remove the spec file",
                )
            )
    holders: dict[tuple[str, str, str], list[str]] = {}
    for uid, record in sorted(records.items()):
        where = f"{record.namespace}/{record.name}"
        if record.state == ClaimState.PREPARE_STARTED:
            found.append(
                Finding(
                    "half-prepared",
                    uid,
                    f"claim {where}: prepare never completed",
                    "roll back (release devices, remove spec)",
                )
            )
        elif record.state == ClaimState.UNPREPARE_STARTED:
            found.append(
                Finding(
                    "half-unprepared",
                    uid,
                    f"claim {where}: unprepare never completed",
                    "finish the unprepare",
                )
            )
        elif record.state == ClaimState.RELEASED:
            found.append(
                Finding(
                    "finalizer-pending",
                    uid,
                    f"claim {where}: released, finalizer not removed yet",
                    "remove the finalizer",
                )
            )
        elif uid not in snapshot.specs:
            found.append(
                Finding(
                    "missing-spec",
                    uid,
                    f"prepared claim {where} has no CDI spec",
                    REWRITE_SPEC if record.cdi_spec is not None else "",
                )
            )
        if record.holds_devices:
            for d in record.devices:
                if not d.admin_access:
                    holders.setdefault((d.pool, d.device, d.share_id), []).append(uid)
    for (pool, device, _), uids in sorted(holders.items()):
        if len(uids) > 1:
            found.append(
                Finding(
                    "device-held-twice",
                    f"{pool}/{device}",
                    f"device {pool}/{device} is recorded for claims {', '.join(uids)}",
                    "",
                )
            )
    if snapshot.in_use is not None:
        found.extend(_backend_findings(snapshot, records, holders))
    if snapshot.claims is not None:
        found.extend(_api_findings(snapshot, records))
    return found


def _backend_findings(
    snapshot: NodeSnapshot,
    records: Mapping[str, Any],
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
    for device, uid in sorted(snapshot.in_use.items()):
        if (device, uid) not in recorded:
            found.append(
                Finding(
                    "orphan-device",
                    device,
                    f"device {device} is in use by claim {uid} with no checkpoint record",
                    "release the device",
                )
            )
    for device, uid in sorted(recorded):
        record = records[uid]
        if record.state == ClaimState.PREPARE_COMPLETED and snapshot.in_use.get(device) != uid:
            found.append(
                Finding(
                    "device-not-held",
                    device,
                    f"claim {uid} is recorded as prepared but the backend does not hold {device}",
                    "",
                )
            )
    return found


def _api_findings(snapshot: NodeSnapshot, records: Mapping[str, Any]) -> list[Finding]:
    assert snapshot.claims is not None
    found: list[Finding] = []
    finalizer = claim_checks.finalizer_name(snapshot.driver)
    by_name = {
        (c.get("metadata", {}).get("namespace", ""), c.get("metadata", {}).get("name", "")): c
        for c in snapshot.claims
    }
    for uid, record in sorted(records.items()):
        claim = by_name.get((record.namespace, record.name))
        where = f"{record.namespace}/{record.name}"
        stale = claim_checks.staleness(
            claim,
            ClaimRef(ClaimUID(uid), record.namespace, record.name),
            driver=snapshot.driver,
            pool=snapshot.pool,
        )
        if stale is not None:
            found.append(Finding(f"claim-{stale.kind}", uid, stale.message, "unprepare the claim"))
            continue
        assert claim is not None
        has_finalizer = finalizer in (claim.get("metadata", {}).get("finalizers") or [])
        if record.state == ClaimState.PREPARE_COMPLETED and not has_finalizer:
            found.append(
                Finding(
                    "prepared-without-finalizer",
                    uid,
                    f"prepared claim {where} lacks the {finalizer} finalizer",
                    "add the finalizer",
                )
            )
    recorded_uids = set(records)
    for (namespace, name), claim in sorted(by_name.items()):
        uid = claim.get("metadata", {}).get("uid", "")
        if (
            finalizer in (claim.get("metadata", {}).get("finalizers") or [])
            and uid not in recorded_uids
        ):
            found.append(
                Finding(
                    "finalizer-without-claim",
                    uid,
                    f"ResourceClaim {namespace}/{name} carries {finalizer} "
                    "but is not prepared here",
                    "remove the finalizer",
                    namespace=namespace,
                    name=name,
                )
            )
    return found


async def repair(ledger: Ledger, findings: Sequence[Finding]) -> RecoveryReport:
    """Fix what can be fixed, through the ledger's recovery and GC paths.

    An invalid spec of a prepared claim is unlinked (as unprepare unlinks specs) so
    that recovery rewrites it from the checkpoint, as it does for a missing one.
    """
    for f in findings:
        if f.kind == "invalid-spec" and f.repair == REWRITE_SPEC:
            ledger.specs.remove(f.subject)
    report = await ledger.recover()
    kinds = {f.kind for f in findings}
    if kinds & STALE_CLAIM_KINDS:
        for uid in await ledger.collect_stale(force=True):
            report.add("stale-claim-unprepared", uid)
    for f in findings:
        if f.kind == "finalizer-without-claim" and ledger.claims is not None:
            for action in await ledger.release_foreign_finalizer(f.namespace, f.name, f.subject):
                report.add(action, f.subject)
        elif f.kind == "prepared-without-finalizer":
            for action in await ledger.restore_finalizer(f.subject):
                report.add(action, f.subject)
    return report
