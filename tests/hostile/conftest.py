"""A driver in the test's event loop over a node root that tests may damage first."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import pytest

from dralet import fsutil
from dralet.checkpoint.model import Checkpoint
from dralet.checkpoint.store import CheckpointStore
from dralet.kubelet import KubeletClaim
from dralet.testing.claims import DRIVER, MemoryClaims, allocated_claim
from tests import claimstore
from tests.node.conftest import Node, running_node

__all__ = ["running_node"]  # re-exported for the hostile tests


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A node root short enough for unix socket paths (108 bytes at most)."""
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


@pytest.fixture
async def node(short_root: Path) -> AsyncIterator[Node]:
    async with running_node(short_root / "node") as n:
        yield n


def add_claim(node: Node, name: str, *devices: str) -> KubeletClaim:
    claim = node.claims.add(
        allocated_claim(name, devices=[(f"r{i}", d) for i, d in enumerate(devices)])
    )
    meta = claim["metadata"]
    return KubeletClaim(meta["namespace"], meta["uid"], meta["name"])


async def node_with_one_claim(
    root: Path, *, claims: MemoryClaims, released: bool, legacy: bool = False
) -> tuple[Path, KubeletClaim]:
    """Run a driver on ``root`` once: prepare a claim on gpu-1 (and unprepare it when
    ``released``). Returns the path of its records and the claim.

    With ``legacy`` the records are left as a release before the record database kept
    them (``checkpoint.json``, schema v2), and that file's path is returned.
    """
    async with running_node(root, claims=claims) as first:
        claim = add_claim(first, "prepared", "gpu-1")
        assert (await first.plugin.prepare([claim])).kubelet_error == ""
        if released:
            assert (await first.plugin.unprepare([claim])).kubelet_error == ""
    settings = first.settings
    if not legacy:
        return settings.store_path, claim
    records = claimstore.records(settings.plugin_dir)
    CheckpointStore(settings.checkpoint_path).save(Checkpoint(driver=DRIVER, claims=records))
    for entry in settings.plugin_dir.glob("claims.db*"):
        entry.unlink()
    return settings.checkpoint_path, claim


def files_under(root: Path) -> list[Path]:
    return sorted(Path(d) / f for d, _, names in os.walk(root) for f in names)


def assert_written_only_inside(root: Path, allowed: Iterable[Path]) -> None:
    """Every file under ``root`` lies in one of the configured directories."""
    dirs = [a.absolute() for a in allowed]
    stray = [f for f in files_under(root) if not any(f.absolute().is_relative_to(d) for d in dirs)]
    assert stray == []


def allowed_dirs(node: Node) -> list[Path]:
    s = node.settings
    return [s.plugin_dir, s.registry_dir, s.cdi_dir, node.backend.state_dir, s.boot_id_path]


def temp_files(node: Node) -> list[Path]:
    return [
        f
        for d in (node.settings.cdi_dir, node.settings.plugin_dir)
        for f in files_under(d)
        if f.name.endswith(".tmp")
    ]


def without_unnamed_temp_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``fsutil`` see a filesystem without ``O_TMPFILE``: every write takes the
    named temp-file route."""
    real_open = os.open

    def open_(path: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsutil.os, "open", open_)
