"""Recovery stays linear in the number of claims: a node with many claims after a reboot
(every claim needs revalidation) rewrites the checkpoint once, not once per claim."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from dralet import failpoints
from tests.recovery.nodekit import LedgerNode

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
    node = LedgerNode.create(tmp_path, gpus=CLAIMS)
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
    node = LedgerNode.create(tmp_path, gpus=CLAIMS)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    await node.prepare(*refs)
    ledger = node.restart()
    with count_hits(CHECKPOINT_WRITTEN) as writes:
        report = await ledger.recover()
    assert report.actions == []
    assert writes[0] == 0
