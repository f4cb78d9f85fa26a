"""An I/O error (EIO, or ENOSPC) at each write of the claim store, in turn, during a
prepare and during an unprepare: after the call and one restart no record is left
half-way (``PrepareStarted``, ``UnprepareStarted``), no device is held without a record,
and a claim whose write failed was answered with its own error, never a success."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet import failpoints
from dralet.checkpoint.model import ClaimState
from tests.recovery.nodekit import EngineNode

WRITES = 6
"""More store writes than one claim's prepare or unprepare makes (with its rollback)."""
HALF_WAY = (ClaimState.PREPARE_STARTED, ClaimState.UNPREPARE_STARTED)
CODES = pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["eio", "enospc"])
POINTS = pytest.mark.parametrize("point", ["store.commit.before", "store.commit.after"])


@contextlib.contextmanager
def error_at(name: str, nth: int, code: int) -> Iterator[list[int]]:
    """Raise ``OSError(code)`` at the ``nth`` hit of failpoint ``name``; yields [hits so far]."""
    real_hit = failpoints.hit
    seen = [0]

    def hit(point: str) -> None:
        if point == name:
            seen[0] += 1
            if seen[0] == nth:
                raise OSError(code, os.strerror(code), point)
        real_hit(point)

    failpoints.hit = hit  # type: ignore[assignment]
    try:
        yield seen
    finally:
        failpoints.hit = real_hit


async def _assert_settled_after_restart(node: EngineNode) -> None:
    engine = node.restart()
    await engine.recover()
    records = node.checkpoint().claims
    assert {u: r.state for u, r in records.items() if r.state in HALF_WAY} == {}
    for device, holder in node.backend.in_use().items():
        assert holder in records, f"{device} is held by {holder}, which has no record"
    await engine.work.cancel_all()


@CODES
@POINTS
@pytest.mark.parametrize("nth", range(1, WRITES + 1))
async def test_an_io_error_at_any_prepare_write_never_strands_the_claim(
    tmp_path: Path, point: str, nth: int, code: int
) -> None:
    node = EngineNode.create(tmp_path, recovery_retry=3600.0)
    await node.engine.recover()
    ref = node.add_claim("c", "gpu-0")
    with error_at(point, nth, code) as hits:
        error = (await node.prepare(ref))[ref.uid].error
    if hits[0] >= nth:
        assert error, "a store write failed, yet the claim was answered prepared"
    else:
        node.assert_prepared(ref, "gpu-0")
    await _assert_settled_after_restart(node)
    record = node.record(ref)
    if error:
        assert record is None or record.state != ClaimState.PREPARE_COMPLETED
        assert node.held_by(ref) == [] or record is not None


@CODES
@POINTS
@pytest.mark.parametrize("nth", range(1, WRITES + 1))
async def test_an_io_error_at_any_unprepare_write_never_strands_the_claim(
    tmp_path: Path, point: str, nth: int, code: int
) -> None:
    node = EngineNode.create(tmp_path, recovery_retry=3600.0)
    await node.engine.recover()
    ref = node.add_claim("c", "gpu-0")
    assert (await node.prepare(ref))[ref.uid].error == ""
    with error_at(point, nth, code) as hits:
        error = (await node.unprepare(ref))[ref.uid]
    if hits[0] < nth:
        assert error == ""
        node.assert_gone(ref)
    await _assert_settled_after_restart(node)
    record = node.record(ref)
    assert record is None or record.state == ClaimState.PREPARE_COMPLETED
