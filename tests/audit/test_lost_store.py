"""``dralet audit --fix --accept-lost-store``: the operator's way on once a node's claim
records are lost for good. Until then the audit says so and ``--fix`` alone changes
nothing the lost records would have known about."""

from __future__ import annotations

import os
from pathlib import Path

from dralet.node.claims import ClaimEngine
from tests.audit.conftest import FINALIZER, AuditedNode

ACCEPT = "--accept-lost-store"


def _lose_records(node: AuditedNode) -> Path:
    node.engine.store.shutdown()
    db = node.settings.store_path
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"")  # a truncation, a filesystem repair
    return db


def _specs(node: AuditedNode) -> list[str]:
    return sorted(os.listdir(node.settings.cdi_dir))


async def test_lost_records_are_reported_and_kept_until_an_operator_accepts(
    node: AuditedNode,
) -> None:
    kept = await node.prepare("kept", "gpu-1")
    _lose_records(node)

    dry = await node.audit()
    (finding,) = [f for f in dry.findings if f.kind == "corrupt-checkpoint"]
    assert "empty" in finding.message
    assert ACCEPT in finding.message
    fixed = await node.audit(fix=True)
    assert fixed.fail_closed
    assert _specs(node) != []
    assert node.backend.in_use() == {"gpu-1": kept.uid}

    accepted = await node.audit(fix=True, accept_lost_store=True)

    assert accepted.actions[0][0] == "lost-store-accepted"
    assert not accepted.fail_closed
    assert accepted.remaining == ()
    assert _specs(node) == []
    assert node.backend.in_use() == {}
    assert list(node.settings.plugin_dir.glob("claims.db.corrupt-*")) != []
    restarted = ClaimEngine(node.settings, backend=node.backend, claims=node.engine.calls.claims)
    await restarted.recover()
    assert not restarted.fail_closed
    node.engine = restarted
    again = await node.prepare("again", "gpu-1")
    assert node.backend.in_use() == {"gpu-1": again.uid}
    assert FINALIZER not in node.cluster.finalizers(kept)


async def test_accepting_a_store_that_is_fine_changes_nothing(node: AuditedNode) -> None:
    kept = await node.prepare("kept", "gpu-1")
    accepted = await node.audit(fix=True, accept_lost_store=True)
    assert not accepted.fail_closed
    assert "lost-store-accepted" not in [a for a, _ in accepted.actions]
    assert set(node.records()) == {kept.uid}
    assert node.backend.in_use() == {"gpu-1": kept.uid}
