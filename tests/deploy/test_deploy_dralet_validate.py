"""``dralet validate --strict`` passes the chart's output for every supported version.

(Checked at the same version where ``dralet validate`` knows it, else at the newest it
knows: the chart renders the same objects for every version from 1.34 on.)

The same objects the strict-schema tests check, now through dralet's own validator
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
from tests.deploy.conftest import KUBERNETES_VERSIONS

from dralet.validation.targets import SUPPORTED_KUBERNETES_VERSIONS

Render = Callable[..., tuple[dict[str, Any], ...]]
VALIDATE_TIMEOUT_S = 60
EXAMPLES = (("driver.enabled", "false"), ("examples.enabled", "true"))
FAILED = 1


def dralet_validate(path: Path, version: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "validate", "-k", version, "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        check=False,
    )


def validator_version(version: str) -> str:
    """``version``, or the newest one ``dralet validate`` knows when it knows none newer."""
    if version in SUPPORTED_KUBERNETES_VERSIONS:
        return version
    return max(SUPPORTED_KUBERNETES_VERSIONS, key=lambda v: int(v.split(".")[1]))


def rendered_file(documents: tuple[dict[str, Any], ...], path: Path) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_dralet_validate_accepts_the_chart_output(
    render: Render, tmp_path: Path, version: str
) -> None:
    documents = render(version) + render(version, EXAMPLES)
    completed = dralet_validate(
        rendered_file(documents, tmp_path / "chart.yaml"), validator_version(version)
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "no problems found" in completed.stdout


def test_dralet_validate_refuses_the_1_34_objects_for_1_32(render: Render, tmp_path: Path) -> None:
    completed = dralet_validate(rendered_file(render("1.34"), tmp_path / "chart.yaml"), "1.32")

    assert completed.returncode == FAILED
    assert "resource.k8s.io/v1" in completed.stdout
