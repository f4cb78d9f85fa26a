"""The releases the real-cluster tests are built for and run on (k8s/releases), without
building anything: each release's pins, scripts/k8s-build's folders and what it builds (with a
stand-in ``go`` that records its calls), and each release's gates and API versions."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.k8scluster import (
    BUILD_SCRIPT,
    DRA_FEATURE_GATES,
    LOCKED_DRA_FEATURE_GATES,
    REMOVED_DRA_FEATURE_GATES,
    ROOT,
    RUNTIME_CONFIG,
    Release,
    find_release,
    listed_releases,
    releases,
)

K8S = ROOT / "k8s"
RELEASE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "devicemetadata-decode",
)
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
FAKE_GO = """#!/usr/bin/env bash
# Records each call (GOTOOLCHAIN, the working folder, the arguments); `go build -o DIR/ PKG...`
# makes DIR/<last element of PKG> for each.
echo "${GOTOOLCHAIN:-unset} $PWD $*" >> "$GO_CALLS"
while [ $# -gt 0 ] && [ "$1" != -o ]; do shift; done
out=$2; shift 2
for pkg; do printf '#!/bin/true\\n' > "$out/${pkg##*/}"; chmod +x "$out/${pkg##*/}"; done
"""


def test_ci_builds_1_37_and_1_38() -> None:
    assert [r.version for r in listed_releases()] == ["v1.37.2", "v1.38.0-beta.0"]


@pytest.mark.parametrize("release", listed_releases(), ids=lambda r: r.id)
def test_each_release_has_its_own_pins(release: Release) -> None:
    go_mod = (K8S / f"v{release.minor}" / "go.mod").read_text()
    assert re.search(rf"^\s*k8s\.io/kubernetes {re.escape(release.version)}$", go_mod, re.M)
    staging = "v0." + release.version.removeprefix("v1.")
    replaced = re.findall(r"^\s*(k8s\.io/\S+) => (\S+) (\S+)$", go_mod, re.M)
    assert ("k8s.io/api", "k8s.io/api", staging) in replaced
    assert all(version == staging for _, _, version in replaced)
    assert (K8S / f"v{release.minor}" / "go.sum").is_file()


def test_1_38_pins_the_etcd_and_go_it_needs() -> None:
    go_mod = (K8S / "v1.38" / "go.mod").read_text()
    # k8s.io/kubernetes@v1.38.0-beta.0 go.mod: go 1.27.0, go.etcd.io/etcd/server/v3 v3.7.3;
    # its .go-version: 1.27.3.
    assert re.search(r"^go 1\.27\.0$", go_mod, re.M)
    assert re.search(r"^toolchain go1\.27\.3$", go_mod, re.M)
    assert re.search(r"^\s*go\.etcd\.io/etcd/server/v3 v3\.7\.3$", go_mod, re.M)


def test_a_release_is_found_by_its_minor_version() -> None:
    assert find_release("1.38").version == "v1.38.0-beta.0"
    assert find_release("v1.37").version == "v1.37.2"
    assert find_release("v1.38.0-beta.0").minor == "1.38"
    with pytest.raises(LookupError, match="k8s/releases"):
        find_release("1.3")


def test_the_tests_run_on_the_releases_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DRALET_K8S_RELEASES", raising=False)
    assert releases() == listed_releases()
    monkeypatch.setenv("DRALET_K8S_RELEASES", "1.38")
    assert [r.version for r in releases()] == ["v1.38.0-beta.0"]
    monkeypatch.setenv("DRALET_K8S_RELEASES", "1.39")
    with pytest.raises(LookupError, match="DRALET_K8S_RELEASES"):
        releases()


@pytest.mark.parametrize("release", listed_releases(), ids=lambda r: r.id)
def test_no_gate_set_is_locked_or_removed(release: Release) -> None:
    assert release.minor in DRA_FEATURE_GATES and release.minor in RUNTIME_CONFIG
    set_gates = set(release.feature_gates)
    assert not set_gates & set(release.locked_feature_gates)
    assert not set_gates & set(release.removed_feature_gates)


def test_1_38_gates_and_api_versions() -> None:
    release = find_release("1.38")
    assert "DynamicResourceAllocation" in REMOVED_DRA_FEATURE_GATES["1.38"]
    for gate in (
        "DRADeviceBindingConditions",
        "DRADeviceTaintRules",
        "DRADeviceTaints",
        "DRAPartitionableDevices",
    ):
        assert gate in LOCKED_DRA_FEATURE_GATES["1.38"] and gate not in release.feature_gates
    for gate in ("DRAConsumableCapacity", "DRAFractionalCapacityRange", "ResourceHealthStatus"):
        assert gate in release.feature_gates  # GA not locked, or beta: can be set
    assert not any(c.startswith("resource.k8s.io/v1beta1") for c in release.runtime_config)


# --- scripts/k8s-build ----------------------------------------------------------------


def _run(cache: Path, *args: str, go_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRALET_K8S_CACHE": str(cache)}
    env.pop("GOTOOLCHAIN", None)  # what the script passes on is the test's to see
    if go_dir is not None:
        env["PATH"] = f"{go_dir}:{env['PATH']}"
        env["GO_CALLS"] = str(go_dir / "calls")
    return subprocess.run(
        [str(BUILD_SCRIPT), *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture
def fake_go(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    go = folder / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    return folder


def _calls(go_dir: Path) -> list[str]:
    path = go_dir / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_print_names_a_folder_per_release_and_one_for_containerd(tmp_path: Path) -> None:
    assert _run(tmp_path, "--print", "1.38").stdout.split() == [str(tmp_path / "v1.38.0-beta.0")]
    assert _run(tmp_path, "--print").stdout.split() == [
        str(tmp_path / "v1.37.2"),
        str(tmp_path / "v1.38.0-beta.0"),
    ]
    containerd = _run(tmp_path, "--print-containerd").stdout.strip()
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/containerd/v2\.\d+\.\d+", containerd)
    refused = _run(tmp_path, "--print", "1.30")
    assert refused.returncode != 0 and "k8s/releases" in refused.stderr


def test_one_release_is_built_with_its_pins_and_containerd_once(
    tmp_path: Path, fake_go: Path
) -> None:
    cache = tmp_path / "cache"
    done = _run(cache, "1.38", go_dir=fake_go)
    assert done.returncode == 0, done.stderr
    calls = _calls(fake_go)
    assert len(calls) == 2  # one go build for containerd, one for the release
    containerd, kubernetes = calls
    assert containerd.startswith("unset ") and "-modfile" not in containerd
    assert [p.rsplit("/", 1)[1] for p in containerd.split()[-3:]] == list(CONTAINERD_BINARIES)
    assert kubernetes.startswith("go1.27.3 ")
    assert f"-modfile={K8S}/v1.38/go.mod" in kubernetes
    assert "gitVersion=v1.38.0-beta.0" in kubernetes
    packages = kubernetes.split(" -o ")[1].split()[1:]
    assert [p.rsplit("/", 1)[1] for p in packages] == list(RELEASE_BINARIES)
    assert not (cache / "v1.37.2").exists()
    for name in RELEASE_BINARIES:
        assert os.access(cache / "v1.38.0-beta.0" / name, os.X_OK)
    again = _run(cache, "1.38", go_dir=fake_go)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert len(_calls(fake_go)) == len(calls)


def _one_release_layout_stamp() -> str:
    """The stamp scripts/k8s-build wrote when k8s/go.mod pinned v1.37.2 alone: a hash of
    go.mod, go.sum, containerd's go.mod and go.sum, and the Go sources under cmd/."""
    sources = sorted(p.relative_to(K8S).as_posix() for p in (K8S / "cmd").rglob("*.go"))
    parts = [K8S / "v1.37" / "go.mod", K8S / "v1.37" / "go.sum"]
    parts += [K8S / "containerd" / "go.mod", K8S / "containerd" / "go.sum"]
    parts += [K8S / s for s in sorted(sources, key=lambda s: s.encode())]
    return hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()[:16]


def test_a_1_37_folder_of_the_one_release_layout_stays_current(
    tmp_path: Path, fake_go: Path
) -> None:
    cache = tmp_path / "cache"
    old = cache / "v1.37.2"
    old.mkdir(parents=True)
    for name in RELEASE_BINARIES + CONTAINERD_BINARIES:
        (old / name).write_text(f"#!/bin/true\n# {name}\n")
        (old / name).chmod(0o755)
    (old / ".stamp").write_text(_one_release_layout_stamp() + "\n")
    done = _run(cache, "1.37", go_dir=fake_go)
    assert done.returncode == 0, done.stderr
    assert _calls(fake_go) == []  # nothing compiled: 1.37 current, containerd taken from it
    assert "v1.37.2: up to date" in done.stdout
    containerd = Path(_run(cache, "--print-containerd").stdout.strip())
    assert (containerd / "ctr").read_text() == (old / "ctr").read_text()


def test_a_release_without_its_pins_is_refused_before_any_build(
    tmp_path: Path, fake_go: Path
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(K8S, tree / "k8s")
    (tree / "scripts").mkdir()
    shutil.copy2(BUILD_SCRIPT, tree / "scripts" / "k8s-build")
    (tree / "k8s" / "releases").write_text("v1.37.2\nv1.39.0\n")
    env = {**os.environ, "DRALET_K8S_CACHE": str(tmp_path / "cache")}
    env |= {"PATH": f"{fake_go}:{env['PATH']}", "GO_CALLS": str(fake_go / "calls")}
    refused = subprocess.run(
        [str(tree / "scripts" / "k8s-build"), "1.39"], capture_output=True, text=True, env=env
    )
    assert refused.returncode != 0
    assert "run scripts/k8s-build --pin v1.39.0" in refused.stderr
    assert _calls(fake_go) == []


def test_the_build_script_says_how_to_use_it() -> None:
    usage = _run(Path("/nonexistent"), "--help").stdout
    assert "--pin" in usage and "--print" in usage and "k8s/releases" in usage
