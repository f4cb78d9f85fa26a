"""``dralet conformance`` usage errors (exit status 2) and its pass/fail table."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dralet.cli import conformance as conformance_cli
from dralet.cli import main
from dralet.testing import conformance

NARROW = 70


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--api-url", "http://127.0.0.1:1"], "exactly one of --socket and --registry-dir"),
        (["--socket", "s", "--registry-dir", "d", "--api-url", "u"], "exactly one of --socket"),
        (["--socket", "s"], "claims need an API server"),
        (["--socket", "s", "--api-url", "u", "--kubeconfig", "k"], "claims need an API server"),
        (["--socket", "s", "--serve-api", "127.0.0.1:0"], "go together"),
        (["--socket", "s", "--serve-api", "nowhere", "--write-kubeconfig", "k"], "HOST:PORT"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main.cli, ["conformance", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_unreachable_api_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main.cli,
        ["conformance", "--socket", "s", "--kubeconfig", str(tmp_path / "missing.yaml")],
    )
    assert result.exit_code == 2
    assert "cannot connect to the API server" in result.stderr


def test_table_fits_the_terminal_and_names_the_failures() -> None:
    result = conformance.SuiteResult(
        cases=(
            conformance.CaseResult("registration.order", "pass", "/var/lib/kubelet/plugins/x"),
            conformance.CaseResult("unprepare.twice", "fail", "second unprepare: " + "x " * 60),
            conformance.CaseResult("cdi.spec-removed", "skip", "no spec file defined them"),
        ),
        driver="gpu.example.com",
        endpoint="/var/lib/kubelet/plugins/gpu.example.com/dra.sock",
        service="v1.DRAPlugin",
    )
    text = conformance_cli.render_text(result, width=NARROW)
    assert all(len(line) <= NARROW for line in text.splitlines()), text
    assert "FAIL" in text and "SKIP" in text and "PASS" in text
    assert text.splitlines()[-1] == "2 of 3 passed; failed: unprepare.twice"
    assert result.passed is False
