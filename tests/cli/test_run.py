"""``dralet run`` fails fast, in one line, when it cannot reach what it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUN_TIMEOUT_S = 60


def _run(
    args: list[str], *, home: Path, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "run", "--node-name", "n1", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--kubeconfig", "/nonexistent.yaml"], {}, "--kubeconfig /nonexistent.yaml: no such file"),
        ([], {"KUBECONFIG": "/nonexistent.yaml"}, "$KUBECONFIG names no existing file"),
        ([], {}, "no Kubernetes API configured"),
    ],
)
def test_unusable_api_access_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = _run(["--plugin-dir", str(tmp_path / "p"), *args], home=tmp_path, env_extra=env)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "p").exists(), "nothing is created before the inputs are checked"


def test_a_kubeconfig_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    result = _run(
        ["--plugin-dir", str(tmp_path / "p"), "--registry-dir", str(tmp_path / "r"),
         "--cdi-dir", str(tmp_path / "cdi"), "--kubeconfig", str(kubeconfig)],
        home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert str(kubeconfig) in result.stderr
    assert "Traceback" not in result.stderr


def test_a_malformed_feature_gate_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(["--standalone", "--feature-gate", "DRADeviceTaints"], home=tmp_path)
    assert result.returncode == 2
    assert "expected GATE=true|false" in result.stderr
