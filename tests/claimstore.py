"""A driver's claim record store from outside the driver: read it as an auditor does, and
damage it the ways disks and people do (fail-closed tests)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dralet.checkpoint import database
from dralet.checkpoint.model import ClaimRecord

__all__ = [
    "damage_record",
    "damage_store",
    "put_record",
    "records",
    "set_row_bytes",
]


def records(plugin_dir: Path) -> dict[str, ClaimRecord]:
    """Every readable record in the store of the driver using ``plugin_dir``."""
    snapshot = database.read_only_snapshot(plugin_dir / "claims.db", plugin_dir / "checkpoint.json")
    return dict(snapshot.checkpoint.claims)


def damage_store(path: Path, content: bytes = b"{not a database") -> None:
    """Replace the whole database (and its log) with ``content``: SQLite cannot read it."""
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()
    path.write_bytes(content)


def damage_record(path: Path, uid: str) -> None:
    """Change one claim's stored record behind its checksum (one bit of bit rot)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        changed = conn.execute(
            "UPDATE claims SET data = replace(data, '\"state\"', '\"stat\"') WHERE uid = ?", (uid,)
        ).rowcount
    finally:
        conn.close()
    if changed != 1:
        raise AssertionError(f"claim {uid} has no record to damage")


def set_row_bytes(path: Path, uid: str, column: str, raw: bytes) -> None:
    """Store ``raw`` as the text of one column of a claim's row, whatever the bytes are
    (invalid UTF-8 included), as a damaged page or another writer could leave it."""
    if column not in ("data", "checksum", "state"):
        raise ValueError(f"no such claim column: {column}")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        changed = conn.execute(
            f"UPDATE claims SET {column} = CAST(? AS TEXT) WHERE uid = ?",
            (raw, uid),
        ).rowcount
    finally:
        conn.close()
    if changed != 1:
        raise AssertionError(f"claim {uid} has no record to damage")


def put_record(plugin_dir: Path, record: ClaimRecord) -> None:
    """Store ``record`` as the driver would (to set up a state by hand)."""
    db = database.RecordDatabase(plugin_dir / "claims.db", legacy=plugin_dir / "checkpoint.json")
    try:
        (result,) = db.apply([database.Put(record)])
    finally:
        db.close()
    if result is not None:
        raise result


def create_store(plugin_dir: Path) -> None:
    """An empty record store, as a driver leaves it at its first start (kept as it is
    when there is one)."""
    plugin_dir.mkdir(parents=True, exist_ok=True)
    if (plugin_dir / "claims.db").exists():
        return
    db = database.RecordDatabase(plugin_dir / "claims.db", legacy=plugin_dir / "checkpoint.json")
    try:
        db.open()
    finally:
        db.close()
