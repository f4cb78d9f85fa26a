"""The claim record database: one row per claim, group commits, per-claim checksums, and
the one-time takeover of an older release's ``checkpoint.json``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dralet import errors
from dralet.checkpoint import codec, database, storefiles
from dralet.checkpoint.allocated import AllocatedDevice
from dralet.checkpoint.database import Drop, Intent, Put, RecordDatabase, Stamp
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord, evolve
from dralet.checkpoint.store import CheckpointStore
from dralet.metrics import DriverMetrics
from dralet.node.claims.store import RecordStore
from dralet.node.settings import DriverSettings
from tests import claimstore


def record(uid: str, *devices: str, state: ClaimState = ClaimState.PREPARE_STARTED) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="default",
        name=f"claim-{uid}",
        state=state,
        devices=tuple(
            DeviceRecord(AllocatedDevice("r", "node-a", d), request_names=("r",)) for d in devices
        ),
    )


def open_db(tmp_path: Path) -> RecordDatabase:
    db = RecordDatabase(tmp_path / "claims.db", legacy=tmp_path / "checkpoint.json")
    db.open()
    return db


def test_one_transaction_applies_each_op_or_refuses_it_alone(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.apply([Intent(record("a", "gpu-0"))])
    results = db.apply(
        [
            Intent(record("b", "gpu-0")),  # gpu-0 is a's
            Intent(record("c", "gpu-1")),
            Put(record("a", "gpu-0", state=ClaimState.PREPARE_COMPLETED)),
        ]
    )
    assert isinstance(results[0], errors.DeviceBusyError)
    assert "a" in str(results[0])
    assert results[1:] == [None, None]
    snapshot = db.snapshot()
    assert sorted(snapshot.checkpoint.claims) == ["a", "c"]
    assert snapshot.checkpoint.claims["a"].state == ClaimState.PREPARE_COMPLETED
    assert db.count(ClaimState.PREPARE_COMPLETED.value) == 1


def test_a_device_is_free_again_once_its_holder_is_released_or_dropped(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.apply([Intent(record("a", "gpu-0")), Intent(record("b", "gpu-1"))])
    db.apply([Put(record("a", "gpu-0", state=ClaimState.RELEASED)), Drop("b")])
    assert db.apply([Intent(record("c", "gpu-0")), Intent(record("d", "gpu-1"))]) == [None, None]


def test_admin_access_and_shares_do_not_hold_the_device_exclusively(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    watcher = ClaimRecord(
        uid="w",
        namespace="default",
        name="w",
        state=ClaimState.PREPARE_STARTED,
        devices=(DeviceRecord(AllocatedDevice("r", "node-a", "gpu-0", admin_access=True)),),
    )
    shares = [
        ClaimRecord(
            uid=f"s{i}",
            namespace="default",
            name=f"s{i}",
            state=ClaimState.PREPARE_STARTED,
            devices=(DeviceRecord(AllocatedDevice("r", "node-a", "gpu-0", share_id=f"share-{i}")),),
        )
        for i in range(2)
    ]
    assert db.apply([Intent(watcher), *map(Intent, shares), Intent(record("x", "gpu-0"))]) == [
        None,
        None,
        None,
        None,
    ]


def test_a_damaged_row_is_reported_for_that_claim_and_never_read_as_another(
    tmp_path: Path,
) -> None:
    db = open_db(tmp_path)
    db.apply([Put(record("a", "gpu-0")), Put(record("b", "gpu-1"))])
    claimstore.damage_record(db.path, "a")
    snapshot = db.snapshot()
    assert sorted(snapshot.checkpoint.claims) == ["b"]
    assert "checksum mismatch" in snapshot.corrupt["a"]
    assert db.read("a") == (None, snapshot.corrupt["a"])
    # A valid row moved under another claim's key fails its checksum too.
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("UPDATE claims SET uid = 'c' WHERE uid = 'b'")
    conn.close()
    assert "c" in db.snapshot().corrupt


def test_a_read_reuses_the_snapshots_record_only_while_its_row_is_unchanged(
    tmp_path: Path,
) -> None:
    db = open_db(tmp_path)
    db.apply([Put(record(uid, f"gpu-{uid}")) for uid in ("a", "b", "c", "d")])
    known = db.snapshot()
    db.apply([Put(record("b", "gpu-b", state=ClaimState.PREPARE_COMPLETED)), Drop("c")])
    claimstore.damage_record(db.path, "d")
    found = db.read_many(["a", "b", "c", "d"], known=known)
    assert found["a"][0] is known.checkpoint.claims["a"]  # unchanged: not decoded again
    changed = found["b"][0]
    assert changed is not None and changed.state is ClaimState.PREPARE_COMPLETED
    assert found["c"] == (None, "")  # gone since
    assert found["d"][0] is None and "checksum mismatch" in found["d"][1]
    assert db.read_many(["a"])["a"][0] is not known.checkpoint.claims["a"]


def test_a_read_hands_back_the_record_written_or_decoded_last_while_its_row_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_db(tmp_path)
    decoded: list[str] = []
    decode = codec.decode_record
    monkeypatch.setattr(
        codec, "decode_record", lambda uid, data: decoded.append(uid) or decode(uid, data)
    )
    written = [record(uid, f"gpu-{uid}") for uid in ("a", "b", "c", "d")]
    db.apply([Put(r) for r in written])
    found = db.read_many(["a", "b", "c", "d"])
    assert [found[r.uid][0] for r in written] == written
    assert all(found[r.uid][0] is r for r in written) and decoded == []
    # Another writer (a second driver instance) changed b's row: it is read from the row.
    other = RecordDatabase(db.path)
    newer = record("b", "gpu-b", state=ClaimState.PREPARE_COMPLETED)
    other.apply([Put(newer)])
    # c's row damaged in place, d's stamped: neither is what was written.
    claimstore.damage_record(db.path, "c")
    other.apply([Stamp("d", "boot-2", None, "2026-12-06T10:00:00Z")])
    other.close()
    found = db.read_many(["a", "b", "c", "d"])
    assert found["a"][0] is written[0]
    assert found["b"] == (newer, "") and found["b"][0] is not newer
    assert found["c"][0] is None and "checksum mismatch" in found["c"][1]
    assert found["d"][0] == evolve(written[3], boot_id="boot-2", updated_at="2026-12-06T10:00:00Z")
    assert sorted(decoded) == ["b", "d"]  # c failed its checksum before decoding
    # What was decoded is handed back in turn, while its row stays the same.
    decoded.clear()
    again = db.read_many(["b", "d"])
    assert again["b"][0] is found["b"][0] and again["d"][0] is found["d"][0] and decoded == []


def test_the_records_kept_for_reads_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "MEMO_RECORDS", 3)
    db = open_db(tmp_path)
    written = [record(uid, f"gpu-{uid}") for uid in ("a", "b", "c", "d")]
    db.apply([Put(r) for r in written])
    found = db.read_many(["b", "c", "d"])
    assert all(found[r.uid][0] is r for r in written[1:])
    oldest = db.read("a")[0]
    assert oldest == written[0] and oldest is not written[0]  # it went first: decoded
    db.apply([Drop("d")])
    assert db.read("d") == (None, "")


def test_a_stamp_is_read_as_part_of_its_record_until_the_record_is_written_again(
    tmp_path: Path,
) -> None:
    db = open_db(tmp_path)
    db.apply([Put(record("a", "gpu-0", state=ClaimState.PREPARE_COMPLETED))])
    known = db.snapshot()
    before = known.checkpoint.claims["a"]
    assert db.apply([Stamp("a", "boot-2", (7, 100, 123), "2026-12-04T10:00:00Z")]) == [None]
    stamped = db.snapshot().checkpoint.claims["a"]
    assert (stamped.boot_id, stamped.cdi_spec_stamp, stamped.updated_at) == (
        "boot-2",
        (7, 100, 123),
        "2026-12-04T10:00:00Z",
    )
    assert stamped.devices == before.devices and stamped.state == before.state
    # The record the snapshot decoded before the stamp is not handed out again.
    assert db.read_many(["a"], known=known)["a"] == (stamped, "")
    # A stamp without a spec stamp keeps the record's.
    db.apply([Stamp("a", "boot-3", None, "2026-12-04T11:00:00Z")])
    assert db.read("a")[0] == evolve(before, boot_id="boot-3", updated_at="2026-12-04T11:00:00Z")
    # Writing the record replaces the stamp: the record is then exactly what was written,
    # and the stamp is gone (it could not apply to a row written again the same).
    for written in (
        record("a", "gpu-0", state=ClaimState.UNPREPARE_STARTED),
        record("a", "gpu-0", state=ClaimState.RELEASED),
    ):
        db.apply([Stamp("a", "boot-4", None, "2026-12-04T12:00:00Z")])
        db.apply([Put(written)])
        assert db.read("a") == (written, "")
        assert stamps(db) == 0
    assert db.apply([Stamp("nobody", "boot-3", None, "")])[0] is not None


def stamps(db: RecordDatabase) -> int:
    conn = sqlite3.connect(db.path, isolation_level=None)
    try:
        return int(conn.execute("SELECT count(*) FROM stamps").fetchone()[0])
    finally:
        conn.close()


def test_a_damaged_stamp_makes_that_claims_record_untrusted(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.apply([Put(record("a", "gpu-0")), Put(record("b", "gpu-1"))])
    db.apply([Stamp(uid, "boot-2", (1, 2, 3), "2026-12-04T10:00:00Z") for uid in ("a", "b")])
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("UPDATE stamps SET boot_id = 'boot-9' WHERE uid = 'a'")
    # A stamp sealed over a spec stamp that is no number is refused, not misread.
    ((base,),) = conn.execute("SELECT base FROM stamps WHERE uid = 'b'").fetchall()
    sealed = database.stamp_checksum("b", base, "boot-2", "1,\u00b2,3", "t")
    conn.execute(
        "UPDATE stamps SET spec = ?, updated_at = 't', checksum = ? WHERE uid = 'b'",
        ("1,\u00b2,3", sealed),
    )
    conn.close()
    snapshot = db.snapshot()
    assert sorted(snapshot.checkpoint.claims) == []
    assert "no spec stamp" in snapshot.corrupt["b"]
    assert "stamp checksum mismatch" in snapshot.corrupt["a"]
    assert db.read("a") == (None, snapshot.corrupt["a"])
    # Its devices stay held meanwhile, as with a damaged row.
    (busy,) = db.apply([Intent(record("c", "gpu-0"))])
    assert isinstance(busy, errors.DeviceBusyError)


def test_a_stamp_made_for_an_earlier_row_no_longer_applies(tmp_path: Path) -> None:
    """A release without stamps sharing the database (a rolling update) writes the row
    and leaves the stamp: the row is the truth, and the stale stamp goes at the next open."""
    db = open_db(tmp_path)
    db.apply([Put(record("a", "gpu-0"))])
    db.apply([Stamp("a", "boot-2", (1, 2, 3), "2026-12-04T10:00:00Z")])
    rewritten = record("a", "gpu-0", state=ClaimState.PREPARE_COMPLETED)
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)", database._row(rewritten))
    conn.close()
    assert db.read("a") == (rewritten, "")
    db.close()
    open_db(tmp_path).close()
    assert stamps(db) == 0


def test_a_reader_opens_a_database_written_before_stamps_existed(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.apply([Put(record("a", "gpu-0"))])
    db.close()
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("DROP TABLE stamps")
    conn.close()
    reader = database.read_only_snapshot(db.path)
    assert sorted(reader.checkpoint.claims) == ["a"]
    # The next driver to open it for writing adds the table.
    again = open_db(tmp_path)
    assert again.apply([Stamp("a", "boot-2", None, "2026-12-04T10:00:00Z")]) == [None]
    assert again.read("a")[0] is not None
    assert database.read_only_snapshot(db.path).checkpoint.claims["a"].boot_id == "boot-2"


def test_a_file_that_is_no_database_makes_the_store_unusable(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.close()
    claimstore.damage_store(db.path)
    with pytest.raises(errors.CheckpointCorruptError, match="not a database"):
        RecordDatabase(db.path).snapshot()


def test_a_store_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    db.close()
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    conn.close()
    with pytest.raises(errors.CheckpointCorruptError, match="newer dralet"):
        open_db(tmp_path)


def test_a_v2_checkpoint_is_taken_over_once_and_renamed(tmp_path: Path) -> None:
    legacy = tmp_path / "checkpoint.json"
    old = Checkpoint(
        driver="gpu.example.com",
        boot_id="boot-1",
        claims={
            "a": record("a", "gpu-0", state=ClaimState.PREPARE_COMPLETED),
            "b": record("b", "gpu-1", state=ClaimState.UNPREPARE_STARTED),
        },
    )
    CheckpointStore(legacy).save(old)
    # Before the driver starts, a reader sees the old file's records and creates nothing.
    assert database.read_only_snapshot(tmp_path / "claims.db", legacy).checkpoint.claims == (
        old.claims
    )
    assert not (tmp_path / "claims.db").exists()

    db = open_db(tmp_path)
    assert db.snapshot().checkpoint.claims == old.claims
    assert not legacy.exists()
    assert (tmp_path / "checkpoint.json.migrated").exists()
    # The devices the old records hold stay held.
    (busy,) = db.apply([Intent(record("c", "gpu-0"))])
    assert isinstance(busy, errors.DeviceBusyError)
    db.close()

    # A crash between the takeover's commit and the rename leaves the old file behind:
    # the database is the truth from then on, and the file is only renamed.
    (tmp_path / "checkpoint.json.migrated").rename(legacy)
    CheckpointStore(legacy).save(Checkpoint(claims={"z": record("z", "gpu-9")}))
    again = open_db(tmp_path)
    assert sorted(again.snapshot().checkpoint.claims) == ["a", "b"]
    assert not legacy.exists()


def test_a_corrupt_checkpoint_is_never_taken_over(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_bytes(b"{garbage")
    with pytest.raises(errors.CheckpointCorruptError, match=r"checkpoint\.json"):
        open_db(tmp_path)
    assert (tmp_path / "checkpoint.json").read_bytes() == b"{garbage"


def test_rows_hold_the_codec_form_of_the_record(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    rec = record("a", "gpu-0")
    db.apply([Put(rec)])
    conn = sqlite3.connect(db.path, isolation_level=None)
    ((data, checksum),) = conn.execute("SELECT data, checksum FROM claims").fetchall()
    conn.close()
    assert codec.decode_record("a", data) == rec
    assert checksum == database.row_checksum("a", data)


async def test_concurrent_writes_share_commits(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("boot-1\n")
    settings = DriverSettings(
        driver_name="gpu.example.com", node_name="node-a", plugin_dir=tmp_path / "plugin"
    )
    metrics = DriverMetrics()
    store = RecordStore(settings, boot_id="boot-1", metrics=metrics)
    store.open()
    claims = 200
    await asyncio.gather(*(store.put(record(f"c{i}", f"gpu-{i}")) for i in range(claims)))
    commits = metrics.registry.get_sample_value("dralet_store_commits_total")
    assert commits is not None and commits < claims
    assert len(store.snapshot().checkpoint.claims) == claims
    await store.close()
    with pytest.raises(errors.TemporaryError, match="closed"):
        await store.put(record("late", "gpu-999"))


_STAMP_TEXT = st.one_of(
    st.text(max_size=24), st.sampled_from(["", "1,2,3", "0,0,0", "1,2", "1,2,3,4", "-1,2,3"])
)


@settings(
    max_examples=150,
    # Each example creates a store (its marker and reserve fsynced): no per-example
    # deadline on a loaded machine.
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    boot_id=st.text(max_size=12),
    spec=_STAMP_TEXT,
    updated_at=st.text(max_size=12),
    sealed=st.booleans(),
    kinds=st.tuples(*(st.sampled_from(["text", "int", "blob", "real"]),) * 3),
)
def test_any_stamp_row_is_applied_ignored_or_fails_that_claim_closed(
    tmp_path_factory: pytest.TempPathFactory,
    boot_id: str,
    spec: str,
    updated_at: str,
    sealed: bool,
    kinds: tuple[str, str, str],
) -> None:
    """Whatever a stamp row holds (sealed or not, any type in any column), a read never
    raises: the record comes back (stamped or not) or that claim alone is corrupt."""
    db = open_db(tmp_path_factory.mktemp("stamp"))
    db.apply([Put(record("a", "gpu-0")), Put(record("b", "gpu-1"))])
    conn = sqlite3.connect(db.path, isolation_level=None)
    ((base,),) = conn.execute("SELECT checksum FROM claims WHERE uid = 'a'").fetchall()
    try:
        checksum = database.stamp_checksum("a", base, boot_id, spec, updated_at)
    except UnicodeEncodeError:
        checksum = "x"
    values: list[object] = []
    for value, kind in zip((boot_id, spec, updated_at), kinds, strict=True):
        values.append(
            {"text": value, "int": 7, "blob": value.encode("utf-8", "replace"), "real": 0.5}[kind]
        )
    conn.execute(
        "INSERT OR REPLACE INTO stamps VALUES ('a', ?, ?, ?, ?, ?)",
        (base, *values, checksum if sealed else "sha256:0"),
    )
    conn.close()
    snapshot = db.snapshot()
    assert snapshot.checkpoint.claims["b"] == record("b", "gpu-1")
    if "a" in snapshot.checkpoint.claims:
        assert sealed and snapshot.checkpoint.claims["a"].boot_id == boot_id
        assert db.read("a")[0] == snapshot.checkpoint.claims["a"]
    else:
        assert "unusable" in snapshot.corrupt["a"]
        assert db.read("a") == (None, snapshot.corrupt["a"])
    db.close()


_SQLITE_SHARED_FIRST = 0x40000002
"""SQLite's shared-lock byte range on a database file (sqlite.org/lockingv3.html,
os_unix.c SHARED_FIRST, SHARED_SIZE 510); a WAL connection holds it while open."""
_LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, int(sys.argv[2]))
    print("free")
except OSError:
    print("held")
"""


def test_a_new_connection_keeps_the_locks_of_the_ones_already_open(tmp_path: Path) -> None:
    """Opening and closing any descriptor of the file drops every POSIX lock the process
    holds on it; another process could then checkpoint and remove the write-ahead log
    under the open connections (sqlite.org/howtocorrupt.html, 2.2)."""
    db = RecordDatabase(tmp_path / "claims.db")
    db.open()
    assert db.snapshot().checkpoint.claims == {}

    def probe() -> str:
        argv = [sys.executable, "-c", _LOCK_PROBE, str(db.path), str(_SQLITE_SHARED_FIRST)]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    assert probe() == "held"
    with concurrent.futures.ThreadPoolExecutor(1) as other_thread:
        other_thread.submit(db.snapshot).result()  # a connection of its own
    assert probe() == "held"
    db.close()
    assert probe() == "free"


def test_an_empty_database_file_is_lost_only_where_nothing_shows_it_in_use(
    tmp_path: Path,
) -> None:
    """A store being created (another thread of this process between creating the file
    and SQLite's first write, or a log still holding the first pages) is not a lost one."""
    db = tmp_path / "claims.db"
    db.write_bytes(b"")
    assert "is empty" in storefiles.damage(db)
    assert storefiles.damage(db, fresh=True) == ""
    assert storefiles.damage(db, read_header=False) == ""  # this process has it open
    Path(f"{db}-wal").write_bytes(b"\0" * 32)  # a log header, no frames
    assert "is empty" in storefiles.damage(db)
    Path(f"{db}-wal").write_bytes(b"\0" * 4128)  # a header and one frame
    assert storefiles.damage(db) == ""
