"""Temp files an interrupted write left behind are removed at start, in every directory the
driver owns, and only those: never another program's file, never a live writer's."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from dralet import fsutil
from dralet.cdi.store import SpecStore
from tests.hostile.conftest import running_node, without_unnamed_temp_files

UID = "6f1d2c3b-0000-4000-8000-000000000001"
OURS = "gpu.example.com-claim"


def _leave(path: Path, content: bytes = b"half-written") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


async def test_start_sweeps_every_leftover_of_ours_and_nothing_else(short_root: Path) -> None:
    root = short_root / "node"
    cdi, plugin, state = root / "cdi", root / "plugins" / "gpu.example.com", root / "gpus"
    ours = [
        _leave(cdi / f".{OURS}_{UID}.json.0123456789abcdef.tmp"),
        _leave(cdi / f".{OURS}_{UID}.json.4242.tmp"),  # an older release's name
        _leave(plugin / ".checkpoint.json.fedcba9876543210.tmp"),
        _leave(plugin / ".checkpoint.json.corrupt-20260101T000000.00112233aabbccdd.tmp"),
        _leave(state / "holds" / ".shard-1.json.a1b2c3d4e5f60718.tmp"),
        _leave(state / ".gpus.json.a1b2c3d4e5f60718.tmp"),  # an older release's name
        _leave(state / "info" / "gpu-0" / ".uuid.a1b2c3d4e5f60718.tmp"),
    ]
    theirs = [
        _leave(cdi / f".other.example.com-claim_{UID}.json.0123456789abcdef.tmp"),
        _leave(cdi / ".vendor-spec.json.tmp"),
        _leave(cdi / "vendor.json"),
        _leave(plugin / ".checkpoint.json.tmp"),  # not a name atomic_write makes
        _leave(state / "notes.tmp"),
    ]
    not_files = cdi / f".{OURS}_{UID}.json.1111111111111111.tmp"
    not_files.symlink_to(cdi / "vendor.json")

    async with running_node(root, backend_state_dir=state) as node:
        assert [p for p in ours if _lexists(p)] == []
        assert [p for p in theirs if not p.exists()] == []
        assert not_files.is_symlink()
        assert (cdi / "vendor.json").read_bytes() == b"half-written"
        claim_files = SpecStore(node.settings.cdi_dir, node.settings.cdi_kind)
        assert claim_files.stray_temp_files() == []  # the symlink is no temp file of ours


def test_a_temp_file_a_live_writer_holds_is_left_alone(tmp_path: Path) -> None:
    held = _leave(tmp_path / ".spec.json.0123456789abcdef.tmp")
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert fsutil.sweep_temp_files(tmp_path) == []
        assert held.exists()
    finally:
        os.close(fd)
    assert fsutil.sweep_temp_files(tmp_path) == [held]
    assert not held.exists()


def test_a_writer_whose_temp_file_was_swept_before_its_lock_takes_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_unnamed_temp_files(monkeypatch)  # an unnamed temp file cannot be swept
    target = tmp_path / "spec.json"
    real_flock = fcntl.flock
    swept: list[Path] = []
    sweeping: list[bool] = []

    def flock_after_a_sweep(fd: int, operation: int) -> None:
        if not sweeping:  # the sweep runs between the writer's create and its flock
            sweeping.append(True)
            swept.extend(fsutil.sweep_temp_files(tmp_path))
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_sweep)
    fsutil.atomic_write(target, b"content")
    monkeypatch.undo()
    assert len(swept) == 1
    assert target.read_bytes() == b"content"
    assert sorted(os.listdir(tmp_path)) == ["spec.json"]


def test_an_unnamed_temp_file_linked_under_a_temp_name_is_never_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "spec.json"
    target.write_bytes(b"old")  # so the new file is renamed over it from a temp name
    real_replace = os.replace
    swept: list[Path] = []

    def replace_after_a_sweep(*args: object, **kwargs: object) -> None:
        swept.extend(fsutil.sweep_temp_files(tmp_path))
        real_replace(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsutil.os, "replace", replace_after_a_sweep)
    fsutil.atomic_write(target, b"content")
    monkeypatch.undo()
    assert swept == []
    assert target.read_bytes() == b"content"
    assert sorted(os.listdir(tmp_path)) == ["spec.json"]


def test_temp_names_are_recognised_only_for_their_target() -> None:
    assert fsutil.is_temp_name(".a.json.0123456789abcdef.tmp", target_prefix="a")
    assert fsutil.is_temp_name(".a.json.77.tmp")
    assert not fsutil.is_temp_name(".a.json.0123456789abcdef.tmp", target_prefix="b")
    assert not fsutil.is_temp_name("a.json.0123456789abcdef.tmp")
    assert not fsutil.is_temp_name(".a.json.tmp")
    assert not fsutil.is_temp_name(".a.json.0123456789ABCDEF.tmp")
