"""``dralet demo`` (the README's first command): its checks pass and it names only files
that still exist when it returns."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_TIMEOUT_S = 120


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "demo", *args],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )


def test_demo_passes_and_names_no_deleted_file() -> None:
    result = _demo()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checks passed" in result.stdout
    for named in re.findall(r"(/\S+\.log)\b", result.stdout):
        assert Path(named).exists(), f"the demo names {named}, which it has removed"
    assert "--work-dir" in result.stdout


def test_demo_keeps_the_driver_log_in_a_work_dir() -> None:
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path is too deep.
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        result = _demo("--work-dir", root)
        assert result.returncode == 0, result.stdout + result.stderr
        log = Path(root) / "driver.log"
        assert f"Driver log: {log}" in result.stdout
        assert log.is_file() and log.stat().st_size > 0


def test_a_driver_that_cannot_start_ends_the_demo_in_one_line(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)  # unix socket paths are limited to 107 bytes
    result = _demo("--work-dir", str(deep))
    assert result.returncode == 1
    assert "the driver exited before it registered" in result.stderr
    assert "107" in result.stderr
    assert "Traceback" not in result.stderr
