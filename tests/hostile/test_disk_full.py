"""A nearly full disk under many claims in one call: every claim that gets an error leaves
no CDI spec, no temp file and no held device behind; the others are fully prepared.

Runs on a small tmpfs mounted for the test (needs root and mount permission; skipped
otherwise), filled to a few KiB free.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet import fsutil
from dralet.cdi.store import SpecStore
from tests import smalldisk
from tests.hostile.conftest import add_claim, running_node
from tests.node.conftest import Node

PAGE = smalldisk.PAGE
TMPFS_BYTES = 512 * 1024
FREE_PAGES = 2
"""Pages left free: a spec file takes one, so one or two claims fit and the rest do not."""
CLAIMS = 8


@pytest.fixture
def small_disk() -> Iterator[Path]:
    with smalldisk.mounted_tmpfs(TMPFS_BYTES) as mountpoint:
        yield mountpoint


def _spec_files(node: Node) -> dict[str, bool]:
    store = SpecStore(node.settings.cdi_dir, node.settings.cdi_kind)
    return {f.claim_uid: True for f in store.scan()}


def _temps(*dirs: Path) -> list[str]:
    return [n for d in dirs for _, _, names in os.walk(d) for n in names if fsutil.is_temp_name(n)]


def _check_every_claim(node: Node, result_claims: dict[str, str], uids: list[str]) -> int:
    """Assert the per-claim outcome on disk and in the backend; returns the failures."""
    specs = _spec_files(node)
    held = node.backend.in_use()
    failed = 0
    for uid in uids:
        error = result_claims[uid]
        if error:
            failed += 1
            assert uid not in specs, f"claim {uid} failed ({error}) but its spec is on disk"
            assert uid not in held.values(), f"claim {uid} failed ({error}) but holds a device"
        else:
            assert uid in specs
            assert uid in held.values()
    return failed


async def test_many_claims_on_a_full_cdi_disk_leave_nothing_behind(
    short_root: Path, small_disk: Path
) -> None:
    async with running_node(short_root / "node", gpus=CLAIMS, cdi_dir=small_disk / "cdi") as node:
        claims = [add_claim(node, f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
        smalldisk.fill(small_disk, free_pages=FREE_PAGES)

        result = await node.plugin.prepare(claims)

        errors = {c.uid: result.claims[c.uid].error for c in claims}
        failed = _check_every_claim(node, errors, [c.uid for c in claims])
        assert failed >= CLAIMS - FREE_PAGES, errors  # the disk really was full
        assert all("No space left" in e for e in errors.values() if e), errors
        assert _temps(node.settings.cdi_dir, node.settings.plugin_dir) == []

        (small_disk / "filler").unlink()  # space returns: the kubelet's retry succeeds
        retried = await node.plugin.prepare(claims)
        assert retried.kubelet_error == ""
        assert len(_spec_files(node)) == CLAIMS


async def test_many_claims_with_cdi_and_checkpoint_on_a_full_disk_leave_nothing_behind(
    short_root: Path, small_disk: Path
) -> None:
    root = short_root / "node"
    async with running_node(
        root,
        gpus=CLAIMS,
        cdi_dir=small_disk / "cdi",
        plugin_dir=small_disk / "plugin",
    ) as node:
        claims = [add_claim(node, f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
        smalldisk.fill(small_disk, free_pages=FREE_PAGES)

        result = await node.plugin.prepare(claims)

        errors = {c.uid: result.claims[c.uid].error for c in claims}
        _check_every_claim(node, errors, [c.uid for c in claims])
        assert _temps(node.settings.cdi_dir, node.settings.plugin_dir) == []
        assert any(errors.values())


def test_fill_leaves_only_the_pages_asked_for(small_disk: Path) -> None:
    smalldisk.fill(small_disk, free_pages=FREE_PAGES)
    with pytest.raises(OSError, match="No space left") as failure:
        fsutil.atomic_write(small_disk / "big", b"x" * (FREE_PAGES + 1) * PAGE)
    assert failure.value.errno == errno.ENOSPC
    assert _temps(small_disk) == []
