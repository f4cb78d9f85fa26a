"""The CDI directory as a runtime sees it: which spec files were renamed into place and
which were written where a runtime could read them half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dralet.conformance.cdifiles import SpecWatch, invalid_specs


def test_renamed_specs_pass_and_in_place_writes_are_caught(tmp_path: Path) -> None:
    watch = SpecWatch(tmp_path)
    assert watch.start()
    try:
        (tmp_path / ".a.json.tmp").write_text("{}")
        os.replace(tmp_path / ".a.json.tmp", tmp_path / "a.json")
        (tmp_path / "b.yaml").write_text("kind: x")
        (tmp_path / "notes.txt").write_text("not a spec")
        watch.drain()
    finally:
        watch.close()
    assert watch.renamed == {"a.json"}
    assert watch.in_place == {"b.yaml"}


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
