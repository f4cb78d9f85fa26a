"""Whatever bytes a claim row or the whole database file holds, the store never reads
damage as a fresh, empty store: a damaged row fails closed for its claim alone (the
others read as written, its devices stay held, its record can be dropped), and a damaged
file is refused as a whole or read with every claim accounted for."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dralet import errors
from dralet.checkpoint import database
from dralet.checkpoint.allocated import AllocatedDevice
from dralet.checkpoint.database import Drop, Intent, Put, RecordDatabase
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from tests import claimstore

EXAMPLES = int(os.environ.get("DRALET_FUZZ_EXAMPLES", "60"))
"""Examples per property (CI size; more for a longer search)."""
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CLAIMS = ("a", "b", "c")


def _record(uid: str, device: str) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="default",
        name=f"claim-{uid}",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(DeviceRecord(AllocatedDevice("gpu", "node-a", device), request_names=("gpu",)),),
        finalizer_added=True,
        boot_id="boot-1",
    )


RECORDS = {uid: _record(uid, f"gpu-{i}") for i, uid in enumerate(CLAIMS)}


def _store(directory: Path) -> Path:
    db = RecordDatabase(directory / "claims.db")
    try:
        db.apply([Put(r) for r in RECORDS.values()])
    finally:
        db.close()
    return directory / "claims.db"


def _mutated(valid: bytes, cut: int | None, flips: list[tuple[int, int]]) -> bytes:
    raw = bytearray(valid if cut is None else valid[: cut % (len(valid) + 1)])
    for position, value in flips:
        if raw:
            raw[position % len(raw)] = value
    return bytes(raw)


ROW_BYTES = st.one_of(
    st.binary(max_size=64),
    st.tuples(
        st.none() | st.integers(min_value=0),
        st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=4),
    ),
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.sampled_from([b'{"state": 7}', b"null", b"{}", b'{"apiVersion": []}']),
)


@FUZZ
@given(raw=ROW_BYTES, column=st.sampled_from(["data", "checksum", "state"]), sealed=st.booleans())
def test_any_row_bytes_fail_only_their_claim(
    tmp_path_factory: pytest.TempPathFactory,
    raw: bytes | tuple[int | None, list[tuple[int, int]]],
    column: str,
    sealed: bool,
) -> None:
    path = _store(tmp_path_factory.mktemp("row"))
    valid = database.encode_row(RECORDS["a"])[0].encode()
    content = _mutated(valid, *raw) if isinstance(raw, tuple) else raw
    claimstore.set_row_bytes(path, "a", column, content)
    if sealed and column == "data":
        with contextlib.suppress(UnicodeDecodeError):
            checksum = database.row_checksum("a", content.decode()).encode()
            claimstore.set_row_bytes(path, "a", "checksum", checksum)

    db = RecordDatabase(path)
    try:
        db.open()
        snapshot = db.snapshot()
        for uid in ("b", "c"):
            assert snapshot.checkpoint.claims[uid] == RECORDS[uid]
            assert db.read(uid) == (RECORDS[uid], "")
        if "a" in snapshot.checkpoint.claims:
            assert snapshot.checkpoint.claims["a"].uid == "a"
        else:
            assert "unusable" in snapshot.corrupt["a"]
            assert db.read("a") == (None, snapshot.corrupt["a"])
        # Its device stays held until its record is dropped (its unprepare).
        (refused,) = db.apply([Intent(_record("thief", "gpu-0"))])
        assert isinstance(refused, errors.DeviceBusyError)
        assert db.apply([Drop("a")]) == [None]
        assert db.apply([Intent(_record("thief", "gpu-0"))]) == [None]
    finally:
        db.close()


FILE_BYTES = st.one_of(
    st.binary(max_size=512),
    st.tuples(
        st.none() | st.integers(min_value=0),
        st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
    ),
)


@FUZZ
@given(raw=FILE_BYTES)
def test_any_file_bytes_are_refused_or_read_never_as_a_fresh_store(
    tmp_path_factory: pytest.TempPathFactory,
    raw: bytes | tuple[int | None, list[tuple[int, int]]],
) -> None:
    path = _store(tmp_path_factory.mktemp("file"))
    valid = path.read_bytes()
    content = _mutated(valid, *raw) if isinstance(raw, tuple) else raw
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    path.write_bytes(content)

    db = RecordDatabase(path)
    try:
        db.open()
        snapshot = db.snapshot()
    except (errors.CheckpointCorruptError, OSError):
        return  # refused as a whole: the engine fails closed (or retries the disk)
    finally:
        db.close()
    accounted = set(snapshot.checkpoint.claims) | set(snapshot.corrupt)
    assert accounted == set(CLAIMS), f"claims read as never recorded: {set(CLAIMS) - accounted}"
    for uid, record in snapshot.checkpoint.claims.items():
        assert record == RECORDS[uid]
