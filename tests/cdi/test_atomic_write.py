"""CDI spec files: written atomically, never seen half-written, removed idempotently."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dralet import failpoints, fsutil
from dralet.cdi import spec as cdi_spec
from dralet.cdi.store import SpecChange, SpecStore, WrittenSpec

KIND = "gpu.example.com/claim"
UID = "6f1d2c3b-0000-4000-8000-000000000001"


def document(size: int, tag: str) -> dict[str, object]:
    devices = tuple(
        cdi_spec.CDIDevice(
            name=f"{UID}-gpu-{i}",
            container_edits=cdi_spec.ContainerEdits(env=(f"TAG={tag}", "PAD=" + "x" * 512)),
        )
        for i in range(size)
    )
    return cdi_spec.to_json(cdi_spec.Spec(kind=KIND, devices=devices))


@dataclass
class Reads:
    seen: collections.Counter[str] = field(default_factory=collections.Counter)
    """Whole documents read, by their TAG."""
    torn: list[str] = field(default_factory=list)
    """The start of every read that was not a whole document."""


@contextlib.contextmanager
def reading(path: Path) -> Iterator[Reads]:
    """A thread reading ``path`` over and over (a missing file is skipped) while the
    block runs."""
    reads = Reads()
    stop = threading.Event()

    def read_loop() -> None:
        while not stop.is_set():
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                tag = json.loads(raw)["devices"][0]["containerEdits"]["env"][0]
            except (ValueError, KeyError, IndexError):
                reads.torn.append(raw[:80].decode(errors="replace"))
                continue
            reads.seen[tag.removeprefix("TAG=")] += 1

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        yield reads
    finally:
        stop.set()
        reader.join()


def test_a_reader_never_sees_a_half_written_spec(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, KIND)
    small, large = document(1, "small"), document(64, "large")  # ~40 KiB: many write() calls
    store.write(UID, small)
    with reading(store.path_for(UID)) as reads:
        for i in range(300):
            store.write(UID, large if i % 2 else small)
    assert reads.torn == []
    assert reads.seen["small"] and reads.seen["large"], reads.seen  # it really saw both
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_reader_never_sees_a_new_spec_half_written(tmp_path: Path) -> None:
    """A spec created anew (linked in whole) is absent or complete, never partial."""
    store = SpecStore(tmp_path, KIND)
    large = document(64, "large")
    with reading(store.path_for(UID)) as reads:
        for _ in range(300):
            store.write(UID, large)
            store.remove(UID)
    assert reads.torn == []
    assert reads.seen["large"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o777])
@pytest.mark.parametrize("exists", [False, True], ids=["new", "replaced"])
def test_a_written_file_has_exactly_the_mode_asked_whatever_the_umask(
    tmp_path: Path, umask: int, exists: bool
) -> None:
    target = tmp_path / "spec.json"
    if exists:
        target.write_bytes(b"old")
        target.chmod(0o600)
    old = os.umask(umask)
    try:
        fsutil.atomic_write(target, b"new", mode=0o644)
    finally:
        os.umask(old)
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert target.read_bytes() == b"new"


def test_without_proc_to_link_by_a_write_takes_the_named_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fsutil, "_FD_PATH", str(tmp_path / "no-proc" / "{}"))
    with fsutil.Directory(tmp_path) as directory:
        directory.replace("a.json", b"1")
        directory.replace("b.json", b"2")
        assert not directory._unnamed  # found out once, then not tried again
    assert (tmp_path / "a.json").read_bytes() == b"1"
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]


@pytest.mark.parametrize("step", ["before-fsync", "after-fsync"])
def test_a_failed_write_leaves_the_old_spec_and_no_temp_file(tmp_path: Path, step: str) -> None:
    store = SpecStore(tmp_path, KIND)
    store.write(UID, document(1, "old"))
    before = store.path_for(UID).read_bytes()
    failpoints.arm(f"cdi.write.{step}", "enospc")
    with pytest.raises(OSError, match="No space left"):
        store.write(UID, document(2, "new"))
    assert store.path_for(UID).read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [store.path_for(UID).name]


def test_remove_is_idempotent_and_scan_lists_only_our_kind(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, KIND)
    other = SpecStore(tmp_path, "other.example.com/claim")
    store.write(UID, document(1, "a"))
    other.write(
        UID,
        cdi_spec.to_json(
            cdi_spec.Spec(
                kind="other.example.com/claim",
                devices=(
                    cdi_spec.CDIDevice(
                        name="dev0", container_edits=cdi_spec.ContainerEdits(env=("A=1",))
                    ),
                ),
            )
        ),
    )
    (tmp_path / "gpu.example.com-claim_junk.yml").write_text("ignored: not a spec extension")
    assert [f.claim_uid for f in store.scan()] == [UID]
    assert store.remove(UID) is True
    assert store.remove(UID) is False
    assert [f.claim_uid for f in store.scan()] == []
    assert [f.claim_uid for f in other.scan()] == [UID]


def test_spec_file_is_named_for_the_claim_and_readable_by_runtimes(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "cdi", KIND)
    path = store.write(UID, document(1, "a"))
    assert path.name == f"gpu.example.com-claim_{UID}.json"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert cdi_spec.from_json(json.loads(path.read_text())).kind == KIND


def test_invalid_documents_are_never_written(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, KIND)
    bad = document(1, "a")
    bad["devices"][0]["name"] = "-bad"  # type: ignore[index]
    with pytest.raises(cdi_spec.CDISpecError, match="should start with a letter or digit"):
        store.write(UID, bad)
    assert os.listdir(tmp_path) == []


def test_only_documents_from_a_checksummed_record_skip_the_parse_back(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, KIND)
    bad = document(1, "a")
    bad["devices"][0]["name"] = "-bad"  # type: ignore[index]
    other = "6f1d2c3b-0000-4000-8000-000000000002"
    refused, written = store.apply([SpecChange(UID, bad), SpecChange(other, bad, checked=True)])
    assert isinstance(refused, cdi_spec.CDISpecError)
    assert isinstance(written, WrittenSpec)
    assert os.listdir(tmp_path) == [written.path.name]
