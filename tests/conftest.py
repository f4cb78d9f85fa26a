"""Shared fixtures: per-test checks that no task is leaked and no host path is touched,
temporary node directories and the real Kubernetes control planes (one per release of
k8s/releases, each started by the first test that needs it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from dralet import failpoints
from tests.harness import podman
from tests.k8scluster import releases
from tests.kubefixtures import k8s_api, k8s_cluster, k8s_clusters, k8s_release

__all__ = ["k8s_api", "k8s_cluster", "k8s_clusters", "k8s_release"]

EVERY_RELEASE = "every_k8s_release"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{EVERY_RELEASE}: a k8s test that runs on each release k8s/releases lists "
        "(the others run on the first)",
    )


HOST_WIDE_MARKERS = ("k8s", "kubelet", "install", "cluster_conformance", "runtime")
"""Tests that must not run beside one another: real kubelets share host-wide names (an
install node's bridge and NAT rules, the install suites' shared node 0), podman runs the
CDI mount points the podman harness makes on the host, and every test against a real
control plane keeps the one-at-a-time timing its waits were sized for (kube-scheduler's
informers, the kubelet's retries)."""

HOST_WIDE_PATHS = (
    "tests/clusterconformance/",
    "tests/install/",
    "tests/k8s/",
    "tests/runtime/",
    "tests/e2e/test_podman_end_to_end.py",
    "tests/hostdev/test_loop_device_podman.py",
    "tests/kube/test_transport.py",
)
"""Where the tests with those marks live; elsewhere, an API-suite test's real-server run
carries the release in its id (``[k8s-1.37]``). The xdist scheduler sees only test ids,
so it goes by these; collection fails when a marked test matches neither."""


def _host_wide(nodeid: str) -> bool:
    return nodeid.startswith(HOST_WIDE_PATHS) or "[k8s-" in nodeid


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stray = [
        item.nodeid
        for item in items
        if any(item.get_closest_marker(m) for m in HOST_WIDE_MARKERS)
        and not _host_wide(item.nodeid)
    ]
    if stray:
        raise pytest.UsageError(
            f"{stray[0]}: marked {'/'.join(HOST_WIDE_MARKERS)} but not under "
            "HOST_WIDE_PATHS (tests/conftest.py), so pytest-xdist could run it beside another"
        )


class _HostWideInTurn(LoadScopeScheduling):
    """``--dist loadscope``, except that every host-wide test is one scope: one worker
    runs them all, in collection order, while the others share the remaining modules."""

    def _split_scope(self, nodeid: str) -> str:
        return "host-wide" if _host_wide(nodeid) else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """``make test`` runs two workers (``-n 2 --dist loadscope``)."""
    if config.getvalue("dist") != "loadscope":
        return None
    return _HostWideInTurn(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked every_k8s_release gets one run per release, ``[k8s-1.38]``."""
    if "k8s_release" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker(EVERY_RELEASE) is None:
        return
    chosen = releases()
    metafunc.parametrize("k8s_release", chosen, ids=[r.id for r in chosen], indirect=True)


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail any async test that leaves background tasks running."""
    before = set(asyncio.all_tasks())
    yield
    leftover = [
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    ]
    if leftover:
        await asyncio.sleep(0)  # give just-cancelled tasks one turn to finish
        leftover = [t for t in leftover if not t.done()]
    assert not leftover, f"test leaked tasks: {[t.get_name() for t in leftover]}"


HOST_PATHS = ("/etc/cdi", "/var/run/cdi", "/var/lib/kubelet")
"""Where drivers, runtimes and kubelets keep their files by default. Every test names
directories of its own, so none may create or remove one of these."""


def _on_host(path: str) -> bool:
    """Whether ``path`` is there, not counting a CDI mount point the podman harness made
    for a run (it removes it after): a run on another xdist worker may hold one."""
    return os.path.lexists(path) and not os.path.lexists(
        os.path.join(path, podman.MOUNT_POINT_MARKER)
    )


@pytest.fixture(autouse=True)
def _host_untouched() -> Iterator[None]:
    before = {path: _on_host(path) for path in HOST_PATHS}
    yield
    changed = [
        f"{path} {'created' if not existed else 'removed'}"
        for path, existed in before.items()
        if _on_host(path) != existed
    ]
    assert not changed, f"the test changed the host: {', '.join(changed)}"


@pytest.fixture(autouse=True)
def _disarm_failpoints() -> Iterator[None]:
    yield
    failpoints.disarm()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dralet-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
