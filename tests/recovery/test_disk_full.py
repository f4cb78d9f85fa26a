"""A full or read-only disk: an error answer leaves nothing behind, and recovery never
crash-loops (it defers the claims it cannot repair and finishes once it can).

The plugin dir (checkpoint, locks) and the CDI dir live on a small tmpfs of their own;
the tests are skipped where mounting one is not permitted.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet.checkpoint.model import ClaimState
from dralet.node.backend import ClaimRef
from tests import smalldisk
from tests.recovery.nodekit import EngineNode, SimulatedCrash, crash_at

FS_BYTES = 1024 * 1024
LEFT_FREE = 4096
CLAIMS = 8
RECOVERY_BOUND = 60.0


@pytest.fixture
def small_fs() -> Iterator[Path]:
    with smalldisk.mounted_tmpfs(FS_BYTES) as mountpoint:
        yield mountpoint


def on_small_fs(tmp_path: Path, mount: Path, **settings: object) -> EngineNode:
    return EngineNode.create(
        tmp_path,
        gpus=CLAIMS,
        strict=True,
        plugin_dir=mount / "plugin",
        cdi_dir=mount / "cdi",
        recovery_retry=0.01,
        **settings,
    )


def assert_nothing_half_done(node: EngineNode, ref: ClaimRef) -> None:
    """An errored claim: no spec, no device held; a record left says roll back."""
    assert not node.spec_path(ref).exists()
    assert node.held_by(ref) == []
    record = node.record(ref)
    assert record is None or record.state != ClaimState.PREPARE_COMPLETED


async def test_prepare_on_a_full_disk_leaves_nothing_half_done(
    tmp_path: Path, small_fs: Path
) -> None:
    node = on_small_fs(tmp_path, small_fs)
    await node.engine.recover()
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    filler = smalldisk.fill(small_fs, free_pages=LEFT_FREE // smalldisk.PAGE)

    outcomes = await node.prepare(*refs)

    failed = [r for r in refs if outcomes[r.uid].error]
    assert failed, "the disk was full: some claim must have failed"
    for ref in refs:
        if outcomes[ref.uid].error:
            assert_nothing_half_done(node, ref)
        else:
            node.assert_prepared(ref, *node.held_by(ref))
    filler.unlink()
    retried = await node.prepare(*refs)  # the kubelet's retry, with space back
    assert all(o.error == "" for o in retried.values())
    assert await node.findings() == []
    assert node.strict is not None
    node.strict.assert_clean()


@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_recovery_on_a_full_or_read_only_disk_serves_and_finishes_later(
    tmp_path: Path, small_fs: Path, fault: str
) -> None:
    node = on_small_fs(tmp_path, small_fs)
    await node.engine.recover()
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(6)]
    with crash_at("claim.prepare.after-spec", nth=3), pytest.raises(SimulatedCrash):
        await node.prepare(*refs)  # killed mid-batch: several claims half-prepared
    node.engine.store.shutdown()  # the killed process holds no file open any more
    filler = smalldisk.fill(small_fs, free_pages=0) if fault == "full" else None
    if fault == "read-only":
        smalldisk.remount(small_fs, "ro")

    engine = node.restart()
    report = await engine.recover()  # never raises: the driver comes up

    assert report.deferred
    assert engine.pending_recovery
    fresh = node.add_claim("fresh", "gpu-7")
    answer = (await node.prepare(fresh))[fresh.uid]  # it answers, per claim
    assert answer.error
    code = errno.ENOSPC if fault == "full" else errno.EROFS
    assert os.strerror(code) in answer.error or "retry" in answer.error

    if filler is not None:
        filler.unlink()
    else:
        smalldisk.remount(small_fs, "rw")
    assert await asyncio.wait_for(engine.work.drain(RECOVERY_BOUND), RECOVERY_BOUND)
    assert not engine.pending_recovery
    assert await node.findings() == []
    for ref in refs:
        record = node.record(ref)
        assert record is None or record.state == ClaimState.PREPARE_COMPLETED
    assert node.strict is not None
    node.strict.assert_clean()
