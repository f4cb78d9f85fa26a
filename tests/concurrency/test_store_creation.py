"""A read of the claim store while another thread of the driver creates it.

Between its creation and SQLite's first write to it the database file is there and
empty. A read that had just found no store, and judged the path a moment later, took
that file for a store whose records were lost, and the driver failed closed on a store
that was being made.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dralet.checkpoint import storefiles
from dralet.checkpoint.database import RecordDatabase

DRIVER = "gpu.example.com"


def test_a_read_that_finds_no_store_while_it_is_created_reads_it_as_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "claims.db"
    db = RecordDatabase(path, driver=DRIVER)
    judge = storefiles.damage
    creator = threading.Thread(target=db.open, name="creator")
    created = threading.Event()
    """The creator's file is there, nothing written to it yet."""
    judged = threading.Event()
    """The reader has judged what it found."""
    sizes_judged: list[int] = []

    def damage(db_path: Path, *, fresh: bool = False, read_header: bool = True) -> str:
        # The interleaving: the reader looks (no file), the creator makes the file and
        # stops before writing to it, then the reader judges the path.
        if fresh:
            created.set()
            judged.wait()
        elif threading.current_thread() is not creator and creator.ident is None:
            creator.start()
            created.wait()
            sizes_judged.append(os.path.getsize(db_path))
            try:
                return judge(db_path, fresh=fresh, read_header=read_header)
            finally:
                judged.set()
        return judge(db_path, fresh=fresh, read_header=read_header)

    monkeypatch.setattr(storefiles, "damage", damage)
    try:
        snapshot = db.snapshot()
    finally:
        judged.set()
        creator.join()

    assert sizes_judged == [0]  # the reader judged the created, still empty file
    assert snapshot.checkpoint.claims == {} and snapshot.corrupt == {}
    assert db.read_many(["a"]) == {"a": (None, "")}
    assert not list(tmp_path.glob("*.corrupt-*"))
    db.close()
