"""``dralet validate`` over the manifest corpus: every file's diagnostics, exactly.

Each ``manifests/NAME.yaml`` (or ``.json``) has ``NAME.expected`` beside it: one
``line:col: ID severity message`` per diagnostic and the summary line, as the CLI prints
them without the file name. A first line ``# dralet-validate: ARGS`` adds CLI options.
Set ``DRALET_UPDATE_EXPECTED=1`` to rewrite the expected files after a deliberate change.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dralet.cli.main import cli
from dralet.validation import catalog
from dralet.validation.targets import Target

MANIFESTS = Path(__file__).parent / "manifests"
CORPUS = sorted(p for p in MANIFESTS.iterdir() if p.suffix in (".yaml", ".json"))
ARGS_PREFIX = "# dralet-validate: "
ERROR_EXIT = 1
BAD_INPUT_EXIT = 2
ERROR_LINE = re.compile(r"\d+:\d+: DRA\d+ error ")


def _args(manifest: Path) -> list[str]:
    first = manifest.read_text(encoding="utf-8").split("\n", 1)[0]
    return shlex.split(first[len(ARGS_PREFIX) :]) if first.startswith(ARGS_PREFIX) else []


def _run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", *args], input=stdin)
    return result.exit_code, result.output


@pytest.mark.parametrize("manifest", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_manifest_gives_exactly_the_expected_diagnostics(manifest: Path) -> None:
    code, output = _run(*_args(manifest), str(manifest))
    prefix = f"{manifest}:"
    lines = [line.removeprefix(prefix) for line in output.splitlines()]
    expected_file = manifest.with_suffix(".expected")
    if os.environ.get("DRALET_UPDATE_EXPECTED"):
        expected_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert lines == expected_file.read_text(encoding="utf-8").splitlines()
    has_errors = any(ERROR_LINE.match(line) for line in lines[:-1])
    assert code == (ERROR_EXIT if has_errors else 0)


def test_corpus_has_valid_and_invalid_manifests() -> None:
    valid = [p for p in CORPUS if p.name.startswith("valid-")]
    invalid = [p for p in CORPUS if not p.name.startswith("valid-")]
    assert {p.name for p in valid} >= {"valid-v1beta1-k132.yaml", "valid-v1-k134.yaml"}
    assert len(invalid) >= 25
    for manifest in valid:
        assert manifest.with_suffix(".expected").read_text().startswith("no problems found")


def test_every_lint_rule_has_a_failing_and_a_passing_example() -> None:
    expected = {p: p.with_suffix(".expected").read_text() for p in CORPUS}
    lint_rules = [rule_id for rule_id in catalog.RULES if rule_id.startswith("DRA1")]
    for rule_id in lint_rules:
        failing = [p for p, text in expected.items() if f" {rule_id} " in text]
        passing = [
            p for p in CORPUS if p.name.startswith("valid-lint-") and rule_id.lower() in p.name
        ]
        assert failing, f"no corpus file fails {rule_id}"
        assert passing, f"no valid-lint-* corpus file passes {rule_id}"


def test_every_rule_is_exercised_by_the_corpus() -> None:
    text = "".join(p.with_suffix(".expected").read_text() for p in CORPUS)
    missing = [rule_id for rule_id in catalog.RULES if f" {rule_id} " not in text]
    assert not missing


def test_json_output_lists_every_diagnostic_with_its_fix() -> None:
    manifest = MANIFESTS / "invalid-allocation-mode-wffc.yaml"
    code, output = _run("-k", "1.34", "-o", "json", str(manifest))
    assert code == ERROR_EXIT
    assert json.loads(output) == [
        {
            "file": str(manifest),
            "line": 13,
            "column": 25,
            "field": "spec.spec.devices.requests[0].allocationMode",
            "id": "DRA010",
            "severity": "error",
            "message": 'allocationMode "WaitForFirstConsumer": supported values: "All", '
            '"ExactCount"; "WaitForFirstConsumer" was a claim-level mode of the removed '
            "v1alpha2 API: remove allocationMode (devices are allocated when the pod is "
            "scheduled)",
            "fix": catalog.rule("DRA010").fix,
        }
    ]


def test_stdin_is_read_for_a_dash() -> None:
    text = (MANIFESTS / "invalid-count.yaml").read_text()
    code, output = _run("-k", "1.34", "-", stdin=text)
    assert code == ERROR_EXIT
    assert output.splitlines()[0] == (
        "<stdin>:11:14: DRA011 error count -1: must be greater than zero"
    )


def test_a_directory_is_walked_and_sorted_by_file(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "claim.yml").write_text((MANIFESTS / "invalid-count.yaml").read_text())
    (tmp_path / "a.json").write_text((MANIFESTS / "invalid-manifest.json").read_text())
    (tmp_path / "notes.txt").write_text("not a manifest")
    code, output = _run("-k", "1.34", str(tmp_path))
    files = [line.split(":", 1)[0] for line in output.splitlines()[:-1]]
    assert files == [str(tmp_path / "a.json")] + [str(tmp_path / "b" / "claim.yml")] * 2
    assert output.splitlines()[-1] == "3 errors, 0 warnings (2 files, 2 objects checked)"
    assert code == ERROR_EXIT


def test_warnings_fail_only_with_strict() -> None:
    manifest = MANIFESTS / "lint-dra104-shared-claim.yaml"
    assert _run(*_args(manifest), str(manifest))[0] == 0
    assert _run(*_args(manifest), "--strict", str(manifest))[0] == ERROR_EXIT


def test_kubernetes_version_selects_the_served_api() -> None:
    manifest = str(MANIFESTS / "valid-v1-k134.yaml")
    code, output = _run("-k", "1.32", manifest)
    assert code == ERROR_EXIT
    assert "DRA003 error apiVersion 'resource.k8s.io/v1' is not served by Kubernetes 1.32" in output
    assert _run("--kubernetes-version", "1.35", manifest)[0] == 0


def test_deprecated_and_removed_versions_follow_the_release() -> None:
    v1beta1 = "resource.k8s.io/v1beta1"
    assert Target("1.34").deprecation(v1beta1) is None
    assert "deprecated since Kubernetes 1.35" in (Target("1.37").deprecation(v1beta1) or "")
    assert Target("1.37").deprecation("resource.k8s.io/v1") is None
    assert Target("1.38").served_resource_versions == ("v1beta2", "v1")
    assert "removed in Kubernetes 1.38" in Target("1.38").unserved_reason(v1beta1)
    assert Target("1.39").served_resource_versions == ("v1",)


def test_default_target_is_the_newest_supported_release_and_help_says_so() -> None:
    assert _run(str(MANIFESTS / "valid-v1-k134.yaml"))[0] == 0
    code, output = _run("--help")
    assert code == 0
    assert "[default: 1.38]" in output
    assert "Exit status:" in output and "1   findings: errors in the manifests" in output


def test_yaml_output_is_the_json_list_in_yaml() -> None:
    manifest = str(MANIFESTS / "invalid-count.yaml")
    code, output = _run("-k", "1.34", "-o", "yaml", manifest)
    assert code == ERROR_EXIT
    listed = yaml.safe_load(output)
    assert listed == json.loads(_run("-k", "1.34", "-o", "json", manifest)[1])
    assert listed[0]["id"] == "DRA011"


def test_an_unreadable_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(b"\xff\xfe\x00apiVersion")
    result = CliRunner().invoke(cli, ["validate", str(binary)])
    assert result.exit_code == BAD_INPUT_EXIT
    assert result.output.count("\n") == 1
    assert result.output.startswith("error: reading the manifests: ")
    assert "Traceback" not in result.output


def test_explain_prints_why_fix_and_examples() -> None:
    code, output = _run("--explain", "dra010")
    assert code == 0
    assert output.startswith("DRA010 (error): allocationMode is neither ExactCount nor All\n")
    for part in ("Why: ", "Fix: ", "Bad:\n", "Good:\n", "allocationMode: WaitForFirstConsumer"):
        assert part in output


def test_explain_refuses_an_unknown_rule() -> None:
    code, output = _run("--explain", "DRA999")
    assert code == 2
    assert "unknown rule 'DRA999'" in output


def test_no_paths_is_a_usage_error() -> None:
    assert _run()[0] == 2


def test_a_clean_file_imports_no_driver_runtime_and_no_position_parser(tmp_path: Path) -> None:
    """Start-up is most of a pre-commit hook's cost: keep heavy modules out of validate."""
    manifest = tmp_path / "class.yaml"
    manifest.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n"
    )
    script = (
        "import sys\n"
        "from dralet.cli.main import cli\n"
        "try:\n"
        f"    cli(['validate', {str(manifest)!r}])\n"
        "except SystemExit as done:\n"
        "    assert done.code in (0, None), done.code\n"
        "heavy = {'grpc', 'aiohttp', 'kubernetes', 'ruamel', 'jsonschema', 'prometheus_client'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_pre_commit_hook_runs_dralet_validate() -> None:
    hooks = yaml.safe_load((Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert (hook["id"], hook["entry"], hook["language"]) == (
        "dralet-validate",
        "dralet validate",
        "python",
    )
    assert set(hook["types_or"]) == {"yaml", "json"}


def test_the_rules_table_in_the_docs_lists_every_rule() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "validate.md").read_text(encoding="utf-8")
    summary = docs.split("\n## ", 1)[0]
    for rule in catalog.RULES.values():
        assert f"| {rule.id} | {rule.severity.value} | {rule.title} |" in docs
    for new_rule in ("DRA005", "DRA006", "DRA023", "DRA024", "DRA108"):
        assert new_rule in summary
    assert "-k 1.35" in summary
