"""``dralet conformance`` usage errors (exit status 2) and its pass/fail table."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dralet import conformance
from dralet.cli import conformance as conformance_cli
from dralet.cli import main

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
        (["--socket", "s", "--api-url", "u", "--kubelet-version", "1.34,1.31"], "'1.31' is not"),
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


def test_table_fits_the_terminal_and_names_the_failures_by_level() -> None:
    result = conformance.SuiteResult(
        cases=(
            conformance.CaseResult("registration.order", "pass", "/var/lib/kubelet/plugins/x"),
            conformance.CaseResult(
                "unprepare.twice", "fail", "second unprepare: " + "x " * 60, kubelet="1.34"
            ),
            conformance.CaseResult("prepare.per-claim-error", "fail", "whole call", kubelet="1.34"),
            conformance.CaseResult("cdi.spec-removed", "skip", "no spec file", kubelet="1.34"),
        ),
        driver="gpu.example.com",
        endpoint="/var/lib/kubelet/plugins/gpu.example.com/dra.sock",
        services=(("1.34", "v1.DRAPlugin"),),
    )
    text = conformance_cli.render_text(result, width=NARROW)
    assert all(len(line) <= NARROW for line in text.splitlines()), text
    assert "FAIL" in text and "SKIP" in text and "PASS" in text and "SHOULD" in text
    assert " ".join(text.split("\n\n")[-1].split()) == (
        "1 of 4 passed; MUST failed: unprepare.twice; SHOULD failed (not counted without "
        "--strict): prepare.per-claim-error"
    )
    assert result.passed is False


def test_should_failures_count_only_with_strict() -> None:
    cases = (conformance.CaseResult("prepare.per-claim-error", "fail", "x", kubelet="1.34"),)
    lenient, strict = conformance.SuiteResult(cases), conformance.SuiteResult(cases, strict=True)
    assert lenient.passed and not strict.passed
    assert 'failures="0"' in lenient.to_junit_xml() and "SHOULD failed: x" in lenient.to_junit_xml()
    assert 'failures="1"' in strict.to_junit_xml()
    assert lenient.to_json()["cases"][0]["level"] == "SHOULD"


def test_no_driver_is_one_line_and_exit_2(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "not" / "yet" / "kubeconfig.yaml"
    result = CliRunner().invoke(
        main.cli,
        [
            "conformance",
            "--registry-dir", str(tmp_path / "registry"),
            "--serve-api", "127.0.0.1:0",
            "--write-kubeconfig", str(kubeconfig),
            "--wait", "0.2",
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert kubeconfig.exists()  # its directory was made
    lines = result.stderr.splitlines()
    assert "waiting up to 0.2s for a driver to register at" in lines[1]
    assert lines[-1].startswith("dralet conformance: no driver registered at ")
    assert "FAIL" not in result.output and "Traceback" not in result.output
