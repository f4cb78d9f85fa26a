"""Recovery stays linear in the number of claims: a node with many claims after a reboot
(every claim needs revalidation) rewrites the checkpoint once, not once per claim."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dralet import failpoints
from dralet.node.backend import AllocatedDevice
from dralet.node.claims import nodewide
from tests.recovery.nodekit import EngineNode

CLAIMS = 24
CHECKPOINT_WRITTEN = "store.commit.after"


@contextlib.contextmanager
def count_hits(name: str) -> Iterator[list[int]]:
    real_hit = failpoints.hit
    counter = [0]

    def hit(point: str) -> None:
        if point == name:
            counter[0] += 1
        real_hit(point)

    failpoints.hit = hit  # type: ignore[assignment]
    try:
        yield counter
    finally:
        failpoints.hit = real_hit


async def test_reboot_revalidation_writes_the_checkpoint_once(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, gpus=CLAIMS)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    assert all(not o.error for o in (await node.prepare(*refs)).values())

    ledger = node.restart(boot_id="boot-2")
    with count_hits(CHECKPOINT_WRITTEN) as writes:
        report = await ledger.recover()

    assert report.count("revalidated-after-reboot") == CLAIMS
    assert writes[0] == 1
    assert {r.boot_id for r in node.checkpoint().claims.values()} == {"boot-2"}
    for i, ref in enumerate(refs):
        node.assert_prepared(ref, f"gpu-{i}")
    assert (await node.restart().recover()).actions == []


async def test_recovery_with_nothing_to_do_writes_nothing(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, gpus=CLAIMS)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    await node.prepare(*refs)
    ledger = node.restart()
    with count_hits(CHECKPOINT_WRITTEN) as writes:
        report = await ledger.recover()
    assert report.actions == []
    assert writes[0] == 0


async def test_reboot_revalidation_in_chunks_settles_each_claim_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More claims than one chunk: each chunk is stamped in one commit; a claim whose
    device did not survive is rolled back and a claim whose spec cannot be written is
    deferred, without holding back any other claim of its chunk."""
    monkeypatch.setattr(nodewide, "REVALIDATE_CHUNK", 5)
    node = EngineNode.create(tmp_path, gpus=CLAIMS)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    assert all(not o.error for o in (await node.prepare(*refs)).values())
    shutil.rmtree(node.settings.cdi_dir)  # /var/run/cdi is a tmpfs: a reboot empties it
    lost, unwritable = refs[3], refs[7]

    ledger = node.restart(boot_id="boot-2")
    survives = ledger.backend.inner.survives_reboot  # type: ignore[union-attr]

    async def survives_unless_lost(device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return device.device != "gpu-3" and await survives(device, state)

    monkeypatch.setattr(ledger.backend.inner, "survives_reboot", survives_unless_lost)
    node.spec_path(unwritable).mkdir(parents=True)  # not a file: never replaced
    with count_hits(CHECKPOINT_WRITTEN) as writes:
        report = await ledger.recover()
    await ledger.work.cancel_all()  # its retry: not this test's subject

    assert report.count("revalidated-after-reboot") == CLAIMS - 2
    assert report.count("rolled-back-after-reboot") == 1
    assert [uid for uid, _ in report.deferred] == [unwritable.uid]
    assert unwritable.uid in ledger.pending_recovery
    node.assert_gone(lost)
    for i, ref in enumerate(refs):
        if ref not in (lost, unwritable):
            node.assert_prepared(ref, f"gpu-{i}")
            record = node.record(ref)
            assert record is not None and record.boot_id == "boot-2"
    stale = node.record(unwritable)
    assert stale is not None and stale.boot_id != "boot-2"  # revalidated again later
    chunks = -(-CLAIMS // 5)
    assert writes[0] >= chunks  # a stamp per chunk (and the rollback's own commits)
    assert writes[0] < CLAIMS


async def test_a_stale_pass_cleans_every_claim_it_can_and_leaves_one_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stale claims are torn down together; one whose release fails stays recorded (and
    is tried again next pass) without holding back the others."""
    node = EngineNode.create(tmp_path, gpus=CLAIMS)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    assert all(not o.error for o in (await node.prepare(*refs)).values())
    node.claims.objects.clear()  # every ResourceClaim is gone
    release = node.backend.release_claim
    failing = refs[5]

    async def release_unless_failing(allocation: Any, states: Any) -> None:
        if allocation.claim.uid == failing.uid:
            raise OSError("device busy")
        await release(allocation, states)

    monkeypatch.setattr(node.backend, "release_claim", release_unless_failing)
    with count_hits(CHECKPOINT_WRITTEN) as writes:
        cleaned = await node.engine.collect_stale(force=True)

    assert sorted(cleaned) == sorted(r.uid for r in refs if r is not failing)
    for ref in refs:
        if ref is not failing:
            node.assert_gone(ref)
    assert node.record(failing) is not None
    assert node.held_by(failing) == ["gpu-5"]
    # One group: one commit for every UnprepareStarted, one removing every record
    # (the failing claim's stays UnprepareStarted).
    assert writes[0] == 2
    monkeypatch.setattr(node.backend, "release_claim", release)
    assert await node.engine.collect_stale(force=True) == [failing.uid]
    node.assert_gone(failing)
