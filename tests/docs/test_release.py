"""The release: one version everywhere, a wheel without test code, and dralet working
installed from that wheel alone, in a fresh virtual environment that cannot see the repo.

The installed-wheel test builds the wheel as ``make dist`` does, installs it (its
dependencies from the package index, as a user's ``pip install`` gets them) and the
example vendor's driver package beside it, then runs from an empty directory with no
``PYTHONPATH``: ``dralet --version``, ``dralet demo``, ``dralet validate`` on the chart
rendered by helm, and ``dralet conformance`` against the vendor's driver as a process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import helm_binary
from tests.docs import pages

pytestmark = pytest.mark.e2e

ROOT = pages.ROOT
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 400
RUN_TIMEOUT_S = 120
VENDOR = ROOT / "examples" / "dralet-example-vendor"


def project_version() -> str:
    """The one place the version is set."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    version: str = project["project"]["version"]
    return version


def test_every_version_string_is_the_projects() -> None:
    version = project_version()
    chart = yaml.safe_load((ROOT / "deploy/chart/dralet/Chart.yaml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (label_default,) = re.findall(r"^ARG DRALET_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    assert "org.opencontainers.image.version=$DRALET_VERSION" in dockerfile
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert metadata.version("dralet") == version
    assert (chart["version"], chart["appVersion"], label_default) == (version, version, version)
    assert f"## [{version}] - " in changelog
    shown = subprocess.run(
        [Path(sys.executable).parent / "dralet", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert shown.stdout.split()[-1] == version


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and wheel, built as ``make dist`` builds them."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("dralet-*.whl")
    return wheel


def test_twine_accepts_the_artefacts(dist: Path) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_wheel_holds_the_package_and_no_test_code(dist: Path) -> None:
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"dralet", f"dralet-{project_version()}.dist-info"}
    assert not [n for n in names if re.search(r"(^|/)(tests?|conftest)(/|\.py$|_)", n)]
    for shipped in ("dralet/py.typed", "dralet/protocol/proto/dra_v1.proto"):
        assert shipped in names
    # The package's own modules, every one (a package without __init__ would be lost).
    sources = {
        str(p.relative_to(ROOT / "src"))
        for p in (ROOT / "src" / "dralet").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sources <= set(names), sorted(sources - set(names))


@pytest.fixture(scope="module")
def installed(dist: Path) -> Iterator[Path]:
    """A fresh virtual environment with the wheel and the vendor's driver; its bin dir."""
    with tempfile.TemporaryDirectory(prefix="dralet-wheel-") as root:
        venv = Path(root) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        # The vendor package from a copy: an install from the repo's own tree could
        # leave build files there.
        vendor = Path(root) / "vendor"
        subprocess.run(["cp", "-r", str(VENDOR), str(vendor)], check=True)
        for leftover in ("build", "src/dralet_example_vendor.egg-info"):
            subprocess.run(["rm", "-rf", str(vendor / leftover)], check=True)
        subprocess.run(
            [*pip, str(_wheel(dist)), str(vendor)],
            cwd=root,
            env=_clean_env(),
            check=True,
            capture_output=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        yield venv / "bin"


_IMPORT_EVERY_MODULE = """
import importlib, pkgutil, dralet
for module in pkgutil.walk_packages(dralet.__path__, "dralet."):
    try:
        importlib.import_module(module.name)
    except Exception as error:
        print(module.name, repr(error))
"""


def _clean_env(bin_dir: Path | None = None) -> dict[str, str]:
    """This environment without anything pointing at the repo or its venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}
    }
    path = [p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT))]
    if bin_dir is not None:
        path.insert(0, str(bin_dir))
    env["PATH"] = os.pathsep.join(path)
    return env


def _run(bin_dir: Path, script: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        cwd=cwd,
        env=_clean_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S + 4 * RUN_TIMEOUT_S)
def test_the_installed_wheel_runs_the_demo_validate_and_conformance(
    installed: Path, tmp_path: Path
) -> None:
    # It is the installed package that answers, not the repo's.
    where = _run(
        installed, "python -c 'import dralet, acme_fpga; print(dralet.__file__)'", tmp_path
    )
    assert where.startswith(str(installed.parent)), where
    assert _run(installed, "dralet --version", tmp_path).split()[-1] == project_version()
    # Every module imports from the wheel alone (no file or dependency of the repo's).
    unimportable = _run(installed, f"python -c '{_IMPORT_EVERY_MODULE}'", tmp_path)
    assert not unimportable.strip(), unimportable

    assert "All 15 checks passed." in _run(installed, "dralet demo", tmp_path)

    chart = ROOT / "deploy" / "chart" / "dralet"
    validated = _run(
        installed,
        f"HELM_CONFIG_HOME={tmp_path}/helm HELM_CACHE_HOME={tmp_path}/helm "
        f"HELM_DATA_HOME={tmp_path}/helm {helm_binary()} template dralet {chart} "
        "-n dralet --kube-version 1.38.0 | dralet validate --strict -",
        tmp_path,
    )
    assert validated.startswith("no problems found"), validated

    with tempfile.TemporaryDirectory(prefix="dralet-cf-") as short:  # short socket paths
        cf = Path(short)
        (cf / "acme.yaml").write_text("devices: 3\nbitstream: crc32.bit\n")
        (cf / "restart.sh").write_text(
            "#!/bin/sh\n"
            f'pid=$(cat {cf}/driver.pid 2>/dev/null) && kill -9 "$pid"\n'
            f'while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.05; done\n'
            f"dralet run --driver acme-fpga --driver-config {cf}/acme.yaml "
            f"--driver-name fpga.acme.example.com --node-name node-a "
            f"--kubeconfig {cf}/kubeconfig.yaml --plugin-dir {cf}/plugins/fpga "
            f"--registry-dir {cf}/registry --cdi-dir {cf}/cdi "
            f">>{cf}/driver.log 2>&1 </dev/null &\n"
            f"echo $! >{cf}/driver.pid\n"
        )
        (cf / "restart.sh").chmod(0o755)
        try:
            report = _run(
                installed,
                f"dralet conformance --serve-api 127.0.0.1:0 --write-kubeconfig "
                f"{cf}/kubeconfig.yaml --registry-dir {cf}/registry --cdi-dir {cf}/cdi "
                f"--driver-name fpga.acme.example.com --node-name node-a "
                f"--kubelet-version 1.37 --restart-cmd {cf}/restart.sh --strict "
                f"2>{cf}/conformance.log &\n"
                f"until [ -f {cf}/kubeconfig.yaml ]; do sleep 0.1; done\n"
                f"{cf}/restart.sh\n"
                "wait $!",
                tmp_path,
            )
        finally:
            pid = (cf / "driver.pid").read_text().strip() if (cf / "driver.pid").exists() else ""
            if pid:
                subprocess.run(["kill", "-9", pid], check=False, capture_output=True)
        assert re.search(r"^(\d+) of \1 passed\.$", report, re.MULTILINE), report
