"""Fixtures of the ``install`` tests: the image built by ``make image``'s script, helm
built by ``make helm``, kubectl built by ``make kubectl``, the real control plane, and
nodes the chart runs on.

Each is skipped with its reason where this machine lacks it (root, podman, the built
binaries); under ``CI=true`` that is a failure instead: CI runs these tests.
"""

from __future__ import annotations

import contextlib
import json
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
from tests.install import release
from tests.install.node import InstallNode, install_node
from tests.install.operator import Operator, condition, until
from tests.k8sapi import ClusterApi
from tests.k8scluster import Cluster, Release

__all__ = [
    "BuiltImage",
    "SharedNode",
    "helm",
    "image",
    "kubectl",
    "node",
    "operator",
    "shared_node",
    "two_nodes",
]

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800
NODE_READY_S = 120
CLEAN_WITHIN_S = 60


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
    """docs/install.md's helm and kubectl commands, as the cluster's admin."""
    return Operator(helm, kubectl, k8s_api, tmp_path / "operator")


class SharedNode:
    """``install-node-0``, made once and kept for every ``node`` test of the session while
    each leaves it as it found it: making a node (containerd, the kubelet, the driver
    image imported) is most of such a test's set-up."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._for = ""
        """The API server URL it was made for."""
        self.node: InstallNode | None = None

    def get(self, cluster: Cluster, api: ClusterApi, image: BuiltImage) -> InstallNode:
        if self.node is not None and self._for == cluster.url:
            if api.get("Node", self.node.name) is None:
                # A test's set-up removed every Node object (ClusterApi.reset); a kubelet
                # registers its node when it starts.
                self.node.restart("kubelet")
            return self.node
        self.close()
        with contextlib.ExitStack() as stack:
            self.node = stack.enter_context(
                install_node(
                    cluster.admin_kubeconfig,
                    cluster.url,
                    index=0,
                    images={image.name: image.archive},
                )
            )
            self._stack, self._for = stack.pop_all(), cluster.url
        return self.node

    def close(self) -> None:
        stack, self._stack, self.node = self._stack, None, None
        if stack is not None:
            stack.close()


def _left_clean(node: InstallNode, api: ClusterApi) -> bool:
    """Whether a test left ``node`` as a new one, once what it uninstalled has stopped
    (within ``CLEAN_WITHIN_S``)."""
    try:
        until(lambda: _clean(node, api) or None, f"{node.name} clean", CLEAN_WITHIN_S)
    except AssertionError:
        return False
    return True


def _clean(node: InstallNode, api: ClusterApi) -> bool:
    """No pod, container, CDI spec, driver directory or registration socket; the
    kubelet and containerd running."""
    k = node.kubelet
    return (
        k.kubelet.poll() is None
        and k.containerd.poll() is None
        and not api.list("Pod", field_selector=f"spec.nodeName={node.name}")
        and not node.ctr("tasks", "ls", "--quiet").stdout.split()
        and not any(k.cdi_dir.iterdir())
        and not any(k.registry_dir.iterdir())
        and not release.plugin_dir(node).exists()
    )


_SHARED = pytest.StashKey[SharedNode]()


def shared_node(request: pytest.FixtureRequest) -> SharedNode:
    """The session's ``SharedNode``, closed as the session ends (before the control plane
    of the session stops: that finalizer was registered earlier). Kept in the session's
    stash, not a fixture of its own, so suites importing ``node`` need nothing more."""
    session = request.session
    if _SHARED not in session.stash:
        session.stash[_SHARED] = SharedNode()
        session.addfinalizer(session.stash[_SHARED].close)
    return session.stash[_SHARED]


def _uninstall_what_is_left(operator: Operator) -> None:
    """Uninstall every release a test left installed, as a failed one does: the examples
    first, the driver last. Left there, the next test's ``helm install`` fails on the name,
    and the driver's DaemonSet would start pods on the other suites' kubelets."""
    left = json.loads(operator.helm("list", "--all-namespaces", "--output", "json") or "[]")
    for r in sorted(left, key=lambda r: r["name"] == release.RELEASE):
        operator.helm("uninstall", r["name"], "-n", r["namespace"], "--wait", "--timeout", "120s")


@pytest.fixture
def node(
    k8s_cluster: Cluster,
    k8s_api: ClusterApi,
    k8s_release: Release,
    image: BuiltImage,
    operator: Operator,
    request: pytest.FixtureRequest,
) -> Iterator[InstallNode]:
    """One real node with the driver image loaded, Ready. Kept for the next test when
    this one leaves it clean (``_left_clean``), else gone with its Node object."""
    reason = realkubelet.missing(k8s_release)
    if reason:
        unavailable(reason)
    shared = shared_node(request)
    made = shared.get(k8s_cluster, k8s_api, image)
    until(lambda: _ready(k8s_api, made), f"{made.name} Ready", NODE_READY_S)
    yield made
    _uninstall_what_is_left(operator)
    if not _left_clean(made, k8s_api):
        shared.close()


def _ready(api: ClusterApi, node: InstallNode) -> bool | None:
    return bool(condition(api.get("Node", node.name) or {}, "Ready")) or None


@pytest.fixture
def two_nodes(
    k8s_cluster: Cluster,
    k8s_api: ClusterApi,
    k8s_release: Release,
    image: BuiltImage,
    operator: Operator,
    request: pytest.FixtureRequest,
) -> Iterator[list[InstallNode]]:
    """Two real nodes on this machine, each seeing its own root at one shared path (and
    no other: the shared node goes first, or the DaemonSet would run on it too)."""
    reason = realkubelet.missing(k8s_release)
    if reason:
        unavailable(reason)
    shared_node(request).close()
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
        _uninstall_what_is_left(operator)
