"""ENOSPC and EACCES while writing a CDI spec or committing a claim record: that claim
gets an error, no partial file is left, and the node's state is as before the call."""

from __future__ import annotations

import pytest

from dralet import failpoints
from tests.hostile.conftest import add_claim, allowed_dirs, assert_written_only_inside, temp_files
from tests.node.conftest import Node

FINALIZER = "gpu.example.com/prepared"


@pytest.mark.parametrize("action", ["enospc", "eacces"])
@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("cdi.write.before-fsync", 1),
        ("cdi.write.after-fsync", 1),
        ("store.commit.before", 1),  # recording the intent
        ("store.commit.after", 1),  # the intent is durable, then the error
        ("store.commit.before", 2),  # recording the completion
        ("store.commit.after", 2),  # the completion is durable, then the error
    ],
)
async def test_write_error_fails_the_claim_and_changes_nothing(
    node: Node, point: str, nth: int, action: str
) -> None:
    ok = add_claim(node, "ok", "gpu-3")
    assert (await node.plugin.prepare([ok])).kubelet_error == ""
    records_before = node.driver.engine.known_claims()
    specs_before = sorted(p.name for p in node.settings.cdi_dir.iterdir())
    victim = add_claim(node, "victim", "gpu-0")

    failpoints.arm(point, action, nth=nth)
    result = await node.plugin.prepare([victim])
    failpoints.disarm()

    error = result.claims[victim.uid].error
    assert error
    assert ("No space left" in error) if action == "enospc" else ("Permission denied" in error)
    assert temp_files(node) == []
    assert node.driver.engine.known_claims() == records_before
    assert sorted(p.name for p in node.settings.cdi_dir.iterdir()) == specs_before
    assert node.backend.in_use() == {"gpu-3": ok.uid}
    assert FINALIZER not in node.claims.finalizers("default", "victim")
    # The kubelet's retry, once the disk is fine again, prepares it.
    assert (await node.plugin.prepare([victim])).kubelet_error == ""
    assert_written_only_inside(node.settings.plugin_dir.parents[2], allowed_dirs(node))


@pytest.mark.parametrize("action", ["enospc", "eacces"])
async def test_write_error_during_unprepare_keeps_the_claim_for_a_retry(
    node: Node, action: str
) -> None:
    claim = add_claim(node, "c", "gpu-1")
    assert (await node.plugin.prepare([claim])).kubelet_error == ""
    failpoints.arm("store.commit.before", action, nth=1)
    failed = await node.plugin.unprepare([claim])
    failpoints.disarm()
    assert failed.claims[claim.uid]
    assert node.backend.in_use() == {"gpu-1": claim.uid}  # nothing released behind its back
    assert temp_files(node) == []
    assert (await node.plugin.unprepare([claim])).kubelet_error == ""
    assert node.backend.in_use() == {}
    assert list(node.settings.cdi_dir.iterdir()) == []
