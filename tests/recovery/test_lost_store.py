"""A claim store that was there and is gone or damaged as a whole is never read as a
new, empty one: the driver fails closed (no new prepare, with the audit command that
lets an operator go on) and still unprepares what the node shows was prepared.

"Never had state" is told from "had state and lost it" by the store's marker (written
durably beside the database when the database is first created) and by the node's own
evidence (this driver's CDI specs, devices its backend holds).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.recovery.nodekit import EngineNode

AUDIT_FIX = "dralet audit --fix --accept-lost-store"
MAGIC = b"SQLite format 3\x00"
HEADER = 100


def _db(node: EngineNode) -> Path:
    return node.settings.store_path


def _size(path: Path) -> int | None:
    return os.path.getsize(path) if os.path.lexists(path) else None


def _drop_log(db: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _empty(db: Path, _: bytes) -> None:
    _drop_log(db)
    db.write_bytes(b"")


def _truncated(db: Path, raw: bytes) -> None:
    _drop_log(db)
    db.write_bytes(raw[: len(raw) // 2 + 7])


def _header_only(db: Path, raw: bytes) -> None:
    _drop_log(db)
    db.write_bytes(raw[:HEADER])


def _wrong_magic(db: Path, raw: bytes) -> None:
    _drop_log(db)
    db.write_bytes(b"Not SQLite at 3\x00" + raw[len(MAGIC) :])


def _directory(db: Path, _: bytes) -> None:
    _drop_log(db)
    db.unlink()
    db.mkdir()


def _dangling_link(db: Path, _: bytes) -> None:
    _drop_log(db)
    db.unlink()
    db.symlink_to(db.with_name("nowhere.db"))


def _planted_link(db: Path, raw: bytes) -> None:
    _drop_log(db)
    other = db.with_name("planted.db")
    other.write_bytes(raw)
    db.unlink()
    db.symlink_to(other)


def _missing(db: Path, _: bytes) -> None:
    _drop_log(db)
    db.unlink()


DAMAGE: dict[str, Callable[[Path, bytes], None]] = {
    "empty": _empty,
    "truncated": _truncated,
    "header-only": _header_only,
    "wrong-magic": _wrong_magic,
    "directory": _directory,
    "dangling-link": _dangling_link,
    "planted-link": _planted_link,
    "missing": _missing,
}


async def _prepared_node(tmp_path: Path) -> tuple[EngineNode, bytes]:
    """A node with claim ``kept`` prepared on gpu-1, its driver gone; the database's
    bytes (its log folded in)."""
    node = EngineNode.create(tmp_path)
    await node.engine.recover()
    kept = node.add_claim("kept", "gpu-1")
    assert (await node.prepare(kept))[kept.uid].error == ""
    node.engine.store.shutdown()  # the last connection folds the log into the file
    return node, _db(node).read_bytes()


async def _assert_fails_closed_and_unprepares(node: EngineNode) -> None:
    engine = node.restart()
    report = await engine.recover()
    assert engine.fail_closed, "a store that had state was read as a fresh one"
    assert report.fail_closed
    kept = node.refs["kept"]
    assert node.spec_path(kept).exists()  # recovery removed nothing it could not prove
    assert node.held_by(kept) == ["gpu-1"]

    fresh = node.add_claim("fresh", "gpu-2")
    error = (await node.prepare(fresh))[fresh.uid].error
    assert "not preparing new claims" in error
    assert AUDIT_FIX in error
    assert node.held_by(fresh) == []

    assert (await node.unprepare(kept))[kept.uid] == ""
    assert not node.spec_path(kept).exists()
    assert node.held_by(kept) == []
    assert node.finalizers(kept) == []

    # The node holds nothing of the driver any more: its next start begins anew.
    engine = node.restart()
    report = await engine.recover()
    assert not engine.fail_closed
    assert report.count("corrupt-checkpoint-reset") == 1
    assert (await node.prepare(fresh))[fresh.uid].error == ""


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_a_store_damaged_as_a_file_fails_closed(tmp_path: Path, damage: str) -> None:
    node, raw = await _prepared_node(tmp_path)
    DAMAGE[damage](_db(node), raw)
    await _assert_fails_closed_and_unprepares(node)


async def test_a_log_without_its_database_fails_closed(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    await node.engine.recover()
    kept = node.add_claim("kept", "gpu-1")
    assert (await node.prepare(kept))[kept.uid].error == ""
    db = _db(node)
    wal = Path(f"{db}-wal")
    assert (_size(wal) or 0) > 0  # the driver runs: its commits are in the log
    saved = tmp_path / "wal"
    shutil.copyfile(wal, saved)
    node.engine.store.shutdown()
    _drop_log(db)
    db.unlink()
    shutil.copyfile(saved, wal)
    await _assert_fails_closed_and_unprepares(node)


async def test_an_empty_store_with_no_trace_of_state_starts_fresh(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    await node.engine.recover()
    node.engine.store.shutdown()
    for marker in node.settings.plugin_dir.glob("claims.db.*"):
        marker.unlink()
    _empty(_db(node), b"")  # a first start killed before it wrote the schema

    engine = node.restart()
    await engine.recover()
    assert not engine.fail_closed
    first = node.add_claim("first", "gpu-0")
    assert (await node.prepare(first))[first.uid].error == ""


async def test_a_missing_store_on_a_new_node_is_created(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    assert _size(_db(node)) is None
    await node.engine.recover()
    assert not node.engine.fail_closed
    first = node.add_claim("first", "gpu-0")
    assert (await node.prepare(first))[first.uid].error == ""
