"""The CDI directory as a runtime sees it: which spec files were put in place whole and
which were written where a runtime could read them half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dralet.conformance.cdifiles import SpecWatch, invalid_specs


def test_specs_put_in_place_whole_pass_and_in_place_writes_are_caught(tmp_path: Path) -> None:
    watch = SpecWatch(tmp_path)
    assert watch.start()
    try:
        (tmp_path / ".a.json.tmp").write_text("{}")
        os.replace(tmp_path / ".a.json.tmp", tmp_path / "a.json")
        fd = os.open(tmp_path, os.O_WRONLY | os.O_TMPFILE, 0o644)
        dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.write(fd, b"{}")
            # linkat(AT_SYMLINK_FOLLOW): a plain link() would link the /proc link itself
            os.link(f"/proc/self/fd/{fd}", "c.json", dst_dir_fd=dir_fd, follow_symlinks=True)
        finally:
            os.close(dir_fd)
            os.close(fd)  # under its final name now: not a write
        (tmp_path / "b.yaml").write_text("kind: x")
        (tmp_path / "d.json").write_text("{}")
        with (tmp_path / "a.json").open("a") as renamed_then_written:
            renamed_then_written.write(" ")
        (tmp_path / "notes.txt").write_text("not a spec")
        watch.drain()
    finally:
        watch.close()
    assert watch.whole == {"c.json"}
    assert watch.in_place == {"a.json", "b.yaml", "d.json"}


def test_a_missing_directory_is_not_watched_and_says_why(tmp_path: Path) -> None:
    watch = SpecWatch(tmp_path / "missing")
    assert not watch.start()
    assert watch.unwatched == f"{tmp_path / 'missing'} did not exist to watch"
    watch.close()


def test_specs_are_judged_by_the_version_they_declare(tmp_path: Path) -> None:
    node = {"path": "/dev/x", "hostPath": "/dev/y"}  # hostPath needs cdiVersion 0.5.0
    for name, version in (("old.json", "0.3.0"), ("new.json", "0.5.0")):
        document = {
            "cdiVersion": version,
            "kind": "v.com/gpu",
            "devices": [{"name": "g0", "containerEdits": {"deviceNodes": [node]}}],
        }
        (tmp_path / name).write_text(json.dumps(document))
    (tmp_path / "other.json").write_text('{"cdiVersion": "0.3.0", "kind": "o.com/x"}')
    problems = invalid_specs(tmp_path, {"v.com/gpu"})
    assert len(problems) == 1 and problems[0].startswith("old.json (cdiVersion 0.3.0): ")
