"""A free-space sweep: 0 to 64 KiB free, in page steps, on the plugin file system (the
claim store), on the CDI file system, and on both. After the call and one restart with
the disk still as full, no record is left half-way (``PrepareStarted`` or
``UnprepareStarted``), no device is held without a record, and every claim was either
fully prepared or answered with its own error.

Runs on small tmpfs mounts (root and mount permission; skipped otherwise).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet.checkpoint.model import ClaimState
from tests import smalldisk
from tests.recovery.nodekit import EngineNode

FS_BYTES = 1024 * 1024
MOST_FREE = 64 * 1024
STEP = smalldisk.PAGE
CLAIMS = 4
HALF_WAY = (ClaimState.PREPARE_STARTED, ClaimState.UNPREPARE_STARTED)


@pytest.fixture(scope="module")
def mounts() -> Iterator[dict[str, Path]]:
    with (
        smalldisk.mounted_tmpfs(FS_BYTES) as plugin_fs,
        smalldisk.mounted_tmpfs(FS_BYTES) as cdi_fs,
    ):
        yield {"plugin": plugin_fs, "cdi": cdi_fs}


def _assert_settled(node: EngineNode, errors: dict[str, str]) -> None:
    records = node.checkpoint().claims
    half = {uid: r.state for uid, r in records.items() if r.state in HALF_WAY}
    assert half == {}, f"records left half-way: {half}"
    for device, holder in node.backend.in_use().items():
        assert holder in records, f"{device} is held by {holder}, which has no record"
    for name, ref in node.refs.items():
        if errors.get(ref.uid, "") == "":
            node.assert_prepared(ref, *node.held_by(ref))
        else:
            record = records.get(ref.uid)
            assert record is None or record.state != ClaimState.PREPARE_COMPLETED, name


@pytest.mark.parametrize("full", ["plugin", "cdi", "both"])
async def test_a_nearly_full_disk_never_strands_a_claim(
    tmp_path: Path, mounts: dict[str, Path], full: str
) -> None:
    filled = [mounts[k] for k in (("plugin", "cdi") if full == "both" else (full,))]
    stranded: list[str] = []
    failed: dict[int, int] = {}
    for free in range(0, MOST_FREE + 1, STEP):
        case = f"free-{free}"
        (tmp_path / case).mkdir()
        node = EngineNode.create(
            tmp_path / case,
            gpus=CLAIMS,
            plugin_dir=mounts["plugin"] / case / "plugin",
            cdi_dir=mounts["cdi"] / case / "cdi",
            recovery_retry=3600.0,
        )
        await node.engine.recover()
        refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
        fillers = [smalldisk.fill(m, free_pages=free // STEP) for m in filled]
        try:
            outcomes = await node.prepare(*refs)
            errors = {uid: o.error for uid, o in outcomes.items()}
            failed[free] = sum(1 for e in errors.values() if e)
            engine = node.restart()
            await engine.recover()
            try:
                _assert_settled(node, errors)
            except AssertionError as exc:
                stranded.append(f"{free} bytes free: {exc}")
        finally:
            await node.engine.work.cancel_all()
            node.engine.store.shutdown()
            for filler in fillers:
                filler.unlink()
            for m in mounts.values():
                shutil.rmtree(m / case, ignore_errors=True)
    assert stranded == []
    assert failed[0] == CLAIMS, "with no space left every claim must fail"
