"""``dralet validate --strict`` passes every rendered deploy/ target for its versions.

The same manifests the strict-schema tests check, now through dralet's own validator
(schemas, API-server rules, CEL, lint rules) run as a real process, as a user would.
The 1.34 objects are refused for 1.32, naming the apiVersion.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

Render = Callable[[str], tuple[dict[str, Any], ...]]
VALIDATE_TIMEOUT_S = 60
TARGETS = [
    ("base", "1.32"),
    ("base", "1.34"),
    ("overlays/k8s-1.32", "1.32"),
    ("overlays/k8s-1.32", "1.33"),
    ("examples/k8s-1.32", "1.32"),
    ("overlays/k8s-1.34", "1.34"),
    ("overlays/k8s-1.34-seamless-upgrade", "1.34"),
    ("examples/k8s-1.34", "1.34"),
    ("examples/k8s-1.34", "1.35"),
]
FAILED = 1


def dralet_validate(path: Path, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "validate", "-k", version, "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        check=False,
    )


def rendered_file(render: Render, target: str, directory: Path) -> Path:
    path = directory / (target.replace("/", "_") + ".yaml")
    path.write_text(yaml.safe_dump_all(render(target), sort_keys=False))
    return path


@pytest.mark.parametrize(("target", "version"), TARGETS, ids=[f"{t}@{v}" for t, v in TARGETS])
def test_dralet_validate_accepts_the_rendered_manifests(
    render: Render, tmp_path: Path, target: str, version: str
) -> None:
    completed = dralet_validate(rendered_file(render, target, tmp_path), version)

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "no problems found" in completed.stdout


def test_dralet_validate_refuses_the_1_34_objects_for_1_32(render: Render, tmp_path: Path) -> None:
    completed = dralet_validate(rendered_file(render, "overlays/k8s-1.34", tmp_path), "1.32")

    assert completed.returncode == FAILED
    assert "resource.k8s.io/v1" in completed.stdout
