"""The store's files judged as files: the marker that says this node had a store, the
reserve kept for rollbacks on a full disk, and what at the database's path is damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dralet import errors
from dralet.checkpoint import storefiles
from dralet.checkpoint.database import Put, RecordDatabase
from tests.checkpoint.test_store_fuzz import RECORDS


def _opened(directory: Path) -> Path:
    db = RecordDatabase(directory / "claims.db", driver="gpu.example.com")
    try:
        db.apply([Put(RECORDS["a"])])
    finally:
        db.close()
    return directory / "claims.db"


def test_opening_leaves_a_marker_and_a_reserve(tmp_path: Path) -> None:
    path = _opened(tmp_path)
    assert "gpu.example.com" in storefiles.marker_path(path).read_text()
    assert os.path.getsize(storefiles.reserve_path(path)) == storefiles.RESERVE_BYTES
    assert storefiles.damage(path) == ""


def test_a_database_of_an_earlier_release_gets_its_marker_when_opened(tmp_path: Path) -> None:
    path = _opened(tmp_path)
    storefiles.marker_path(path).unlink()
    RecordDatabase(path).open()
    assert storefiles.marker_path(path).exists()


def test_a_new_node_has_no_damage_and_a_lost_store_has(tmp_path: Path) -> None:
    path = tmp_path / "claims.db"
    assert storefiles.damage(path) == ""
    storefiles.write_marker(path, driver="d")
    assert "had a claim store" in storefiles.damage(path)
    with pytest.raises(errors.CheckpointCorruptError, match="had a claim store"):
        RecordDatabase(path).snapshot()
    with pytest.raises(errors.CheckpointCorruptError, match="had a claim store"):
        RecordDatabase(path).open()
    assert not path.exists()  # never created in its place


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda raw: raw[:0], "empty"),
        (lambda raw: raw[:40], "shorter than a database header"),
        (lambda raw: raw[:100], "not a whole number"),
        (lambda raw: raw[:-1], "not a whole number"),
        (lambda raw: b"PK\x03\x04" + raw[4:], "not a database"),
        (lambda raw: raw[:16] + b"\x03\x00" + raw[18:], "page size 768"),
    ],
    ids=["empty", "short", "header-only", "one-byte-short", "wrong-magic", "bad-page-size"],
)
def test_damage_names_what_is_wrong(tmp_path: Path, change: object, why: str) -> None:
    path = _opened(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(change(raw))  # type: ignore[operator]
    assert why in storefiles.damage(path)
    with pytest.raises(errors.CheckpointCorruptError, match=why):
        RecordDatabase(path).open()


def test_the_reserve_is_given_back_and_kept_again(tmp_path: Path) -> None:
    path = _opened(tmp_path)
    assert storefiles.release_reserve(path)
    assert not storefiles.release_reserve(path)
    assert storefiles.ensure_reserve(path)
    assert os.path.getsize(storefiles.reserve_path(path)) == storefiles.RESERVE_BYTES
