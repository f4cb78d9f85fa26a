"""Fixtures of the ``install`` tests: the image built by ``make image``'s script, helm
built by ``make helm``, kubectl built by ``make kubectl``, the real control plane, and
nodes the chart runs on.

Each is skipped with its reason where this machine lacks it (root, podman, the built
binaries); under ``CI=true`` that is a failure instead: CI runs these tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests import realkubelet
from tests.install.node import InstallNode, install_node
from tests.install.operator import Operator
from tests.k8sapi import ClusterApi
from tests.k8scluster import Cluster, Release

__all__ = ["BuiltImage", "helm", "image", "kubectl", "node", "operator", "two_nodes"]

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the install tests: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class BuiltImage:
    name: str
    """As podman names it, without ``localhost/``: ``dralet:<tag>``."""
    archive: Path
    """``podman save --format oci-archive`` of it."""
    build_s: float
    report: str
    """scripts/build-image's last line: id, size, base, time."""


def build_image(tag: str, out: Path) -> BuiltImage:
    start = time.monotonic()
    done = subprocess.run(
        [str(REPO / "scripts" / "build-image"), tag],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-image failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    seconds = time.monotonic() - start
    archive = out / f"dralet-{tag}.tar"
    subprocess.run(
        ["podman", "save", "--format", "oci-archive", "-o", str(archive), f"dralet:{tag}"],
        check=True,
        capture_output=True,
    )
    return BuiltImage(f"dralet:{tag}", archive, seconds, done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """The driver image with the chart's default tag (its appVersion)."""
    if shutil.which("podman") is None:
        unavailable("podman is not installed")
    if shutil.which("mmdebstrap") is None and not os.environ.get("PYTHON_IMAGE"):
        unavailable("mmdebstrap is not installed (it makes the image's Debian base)")
    chart = (REPO / "deploy" / "chart" / "dralet" / "Chart.yaml").read_text()
    tag = next(
        line.split(":", 1)[1].strip().strip('"')
        for line in chart.splitlines()
        if line.startswith("appVersion:")
    )
    return build_image(tag, tmp_path_factory.mktemp("image"))


def _helm() -> str | None:
    given = os.environ.get("DRALET_HELM")
    if given and os.access(given, os.X_OK):
        return given
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    found = sorted(p for p in (cache / "dralet" / "helm").glob("*/helm") if os.access(p, os.X_OK))
    return str(found[-1]) if found else shutil.which("helm")


@pytest.fixture(scope="session")
def helm() -> str:
    binary = _helm()
    if binary is None:
        unavailable("helm is not installed: `make helm` builds it")
    assert binary is not None
    return binary


@pytest.fixture
def kubectl(k8s_release: Release) -> str:
    """kubectl of the control plane's release: $DRALET_KUBECTL, else what ``make kubectl``
    built (scripts/kubectl-build)."""
    given = (
        os.environ.get("DRALET_KUBECTL")
        or subprocess.run(
            [str(REPO / "scripts" / "kubectl-build"), "--print", k8s_release.version],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    if not os.access(given, os.X_OK):
        unavailable(f"no kubectl at {given}: `make kubectl` builds it")
    return given


@pytest.fixture
def operator(helm: str, kubectl: str, k8s_api: ClusterApi, tmp_path: Path) -> Operator:
    """The README's helm and kubectl commands, as the cluster's admin."""
    return Operator(helm, kubectl, k8s_api, tmp_path / "operator")


@pytest.fixture
def node(
    k8s_cluster: Cluster, k8s_api: ClusterApi, k8s_release: Release, image: BuiltImage
) -> Iterator[InstallNode]:
    """One real node with the driver image loaded; gone (and its Node object) after."""
    reason = realkubelet.missing(k8s_release)
    if reason:
        unavailable(reason)
    with install_node(
        k8s_cluster.admin_kubeconfig, k8s_cluster.url, index=0, images={image.name: image.archive}
    ) as made:
        yield made


@pytest.fixture
def two_nodes(
    k8s_cluster: Cluster, k8s_api: ClusterApi, k8s_release: Release, image: BuiltImage
) -> Iterator[list[InstallNode]]:
    """Two real nodes on this machine, each seeing its own root at one shared path."""
    reason = realkubelet.missing(k8s_release)
    if reason:
        unavailable(reason)
    with contextlib.ExitStack() as stack:
        # Short: the driver's socket paths under it must fit a unix socket address.
        view = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dralet-view-")))
        nodes = [
            stack.enter_context(
                install_node(
                    k8s_cluster.admin_kubeconfig,
                    k8s_cluster.url,
                    index=index,
                    images={image.name: image.archive},
                    shared_view=view,
                )
            )
            for index in (1, 2)
        ]
        yield nodes
