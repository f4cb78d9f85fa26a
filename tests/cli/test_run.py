"""``dralet run`` fails fast, in one line, when it cannot reach what it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
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


def test_an_unknown_driver_is_one_line_listing_the_installed_ones(tmp_path: Path) -> None:
    result = _run(["--standalone", "--driver", "no-such-driver"], home=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: unknown driver 'no-such-driver' (available: acme-fpga, ")
    assert {"example", "example-strict", "hostdev"} <= set(
        line.partition("(available: ")[2].rstrip(")").split(", ")
    )


def test_an_unreadable_driver_config_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "fpga.yaml"
    result = _run(["--standalone", "--driver-config", str(missing)], home=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"--driver-config {missing}: No such file or directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_factory_that_refuses_its_config_names_the_driver(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="dralet-"))
    try:
        result = _run(
            ["--standalone", "--driver-option", "colour=red",
             "--plugin-dir", str(short / "p"), "--registry-dir", str(short / "r"),
             "--cdi-dir", str(short / "cdi")],
            home=tmp_path,
        )  # fmt: skip
    finally:
        shutil.rmtree(short)
    assert result.returncode == 1, result.stderr
    assert (
        "cannot start: driver 'example' could not start: ValueError: unknown setting(s) colour"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_a_malformed_driver_option_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(["--standalone", "--driver-option", "gpus"], home=tmp_path)
    assert result.returncode == 2
    assert "expected KEY=VALUE, got 'gpus'" in result.stderr


def test_flag_defaults_are_the_settings_defaults() -> None:
    from dralet.cli import run
    from dralet.node.publisher import PublisherSettings
    from dralet.node.settings import DriverSettings

    defaults = {param.name: param.default for param in run.command.params}
    plain = DriverSettings(driver_name="gpu.example.com", node_name="n1")
    for name in ("registry_dir", "cdi_dir", "stale_claim_grace", "max_parallel_claims"):
        assert defaults[name] == getattr(plain, name), name
    assert defaults["health_port"] is plain.health_port is None
    assert defaults["unhealthy_taint_effect"] == PublisherSettings().unhealthy_taint_effect


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "hostdev needs its configuration: --driver-config FILE"),
        (
            "groups:\n  - name: Bad\n    match: {paths: [/dev/null]}\n",
            "hostdev.yaml:2: groups.0.name",
        ),
    ],
)
def test_hostdev_without_a_usable_config_is_one_line(
    tmp_path: Path, config: str | None, message: str
) -> None:
    node = tmp_path / "node"  # none of its directories exist yet
    args = ["--standalone", "--driver", "hostdev", "--plugin-dir", str(node / "plugins" / "p")]
    args += ["--registry-dir", str(node / "registry"), "--cdi-dir", str(node / "run" / "cdi")]
    if config is not None:
        (tmp_path / "hostdev.yaml").write_text(config)
        args += ["--config", str(tmp_path / "hostdev.yaml")]
    result = _run(args, home=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    assert message in line
    assert "Traceback" not in result.stderr
    # Bad input changes nothing: the directories made at start are gone again.
    assert not node.exists(), sorted(str(p) for p in node.rglob("*"))
