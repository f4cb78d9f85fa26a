"""Recovery proves a claim's spec by its stamp (inode, size, modification time) instead of
reading it: the stamp is recorded when the spec is written (also when a reboot's
revalidation rewrites it), an unchanged file is not read again at restart, and a file
replaced by anything else (a new inode) is read and judged as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dralet.cdi import store as cdi_store
from tests.recovery.nodekit import EngineNode


def stamp(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return (info.st_ino, info.st_size, info.st_mtime_ns)


async def test_the_written_specs_stamp_is_recorded(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1")
    await node.prepare(a)
    record = node.record(a)
    assert record is not None
    assert record.cdi_spec_stamp == stamp(node.spec_path(a))


async def test_an_unchanged_spec_is_not_read_at_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1")
    await node.prepare(a)
    read: list[Path] = []
    original = Path.read_text

    def spying(self: Path, *args: object, **kwargs: object) -> str:
        read.append(self)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", spying)
    report = await node.restart().recover()
    assert report.actions == []
    assert node.spec_path(a) not in read


async def test_a_replaced_spec_is_read_found_wrong_and_rewritten(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1")
    await node.prepare(a)
    path = node.spec_path(a)
    content = path.read_bytes()
    document = json.loads(content)
    document["devices"][0]["containerEdits"]["env"] = ["PLANTED=1"]
    planted = path.with_name(".planted")
    planted.write_text(json.dumps(document))
    os.replace(planted, path)

    report = await node.restart().recover()

    assert report.count("spec-rewritten") == 1
    assert path.read_bytes() == content
    record = node.record(a)
    assert record is not None


async def test_a_reboot_records_the_stamps_of_the_specs_it_rewrites(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1")
    await node.prepare(a)
    node.spec_path(a).unlink()
    (tmp_path / "boot_id").write_text("boot-2\n")

    report = await node.restart().recover()

    assert report.count("revalidated-after-reboot") == 1
    record = node.record(a)
    assert record is not None
    assert record.cdi_spec_stamp == stamp(node.spec_path(a))
    scanned = cdi_store.SpecStore(node.settings.cdi_dir, node.settings.cdi_kind).scan(stamps=True)
    assert [f.stamp for f in scanned] == [record.cdi_spec_stamp]
