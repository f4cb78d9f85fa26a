"""A claim row that cannot be decoded fails closed for that claim alone: every other
claim is prepared and unprepared as before, and the damaged claim is unprepared from
what the node shows (its spec, its held devices)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import claimstore
from tests.recovery.nodekit import EngineNode

BAD_UTF8 = b'{"state": "\xff\xfe PrepareCompleted"}'


@pytest.mark.parametrize(
    ("column", "raw"),
    [
        ("data", BAD_UTF8),
        ("checksum", b"sha256:\xc3\x28"),
        ("data", b"[" * 100_000),
        ("data", b'{"state": 7}'),
    ],
    ids=["data-not-utf8", "checksum-not-utf8", "nesting-bomb", "wrong-types"],
)
async def test_an_undecodable_row_fails_only_its_claim(
    tmp_path: Path, column: str, raw: bytes
) -> None:
    node = EngineNode.create(tmp_path)
    await node.engine.recover()
    damaged = node.add_claim("damaged", "gpu-0")
    healthy = node.add_claim("healthy", "gpu-1")
    outcomes = await node.prepare(damaged, healthy)
    assert all(o.error == "" for o in outcomes.values())
    claimstore.set_row_bytes(node.settings.store_path, damaged.uid, column, raw)

    engine = node.restart()
    await engine.recover()
    assert not engine.fail_closed
    assert node.spec_path(damaged).exists()  # recovery left the damaged claim alone
    again = await node.prepare(damaged, healthy)
    assert "not preparing new claims" in again[damaged.uid].error
    assert again[healthy.uid].error == ""
    thief = node.add_claim("thief", "gpu-0")
    assert damaged.uid in (await node.prepare(thief))[thief.uid].error
    fresh = node.add_claim("fresh", "gpu-2")
    assert (await node.prepare(fresh))[fresh.uid].error == ""

    assert (await node.unprepare(healthy))[healthy.uid] == ""
    assert (await node.unprepare(damaged))[damaged.uid] == ""
    assert not node.spec_path(damaged).exists()
    assert node.held_by(damaged) == []
    assert node.finalizers(damaged) == []
    node.assert_gone(healthy)
    assert (await node.prepare(thief))[thief.uid].error == ""
