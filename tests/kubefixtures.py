"""Fixtures shared by the API suites: an API backend per Kubernetes version and a
``KubeClient`` connected to it.

The backends are the API stand-in for 1.32 (v1beta1 only) and 1.34 (v1), and the real
Kubernetes control plane (``k8s``: kube-apiserver, controller-manager and scheduler built by
``make k8s``) of the default release. On the real server the client acts as the driver's own
ServiceAccount with deploy/'s RBAC; test objects are made as the admin and removed after each
test.

A ``k8s`` test runs on the default release (the first of k8s/releases, or of those
``DRALET_K8S_RELEASES`` names); one marked ``every_k8s_release`` runs on each, its id naming
the release (``[k8s-1.38]``). Each release's control plane starts when the first test needs
it and runs until the session ends.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from dralet import kube
from dralet.apiserver import ApiServer
from dralet.metrics import DriverMetrics
from tests.k8sapi import ClusterApi
from tests.k8scluster import Cluster, ClusterPool, Release, default_release, missing_binaries

KUBERNETES_VERSIONS = ["1.32", "1.34"]
REAL = default_release().id
# The first test on the real cluster starts it (tens of seconds on a busy machine).
K8S_TIMEOUT = pytest.mark.timeout(300)
BACKENDS = [*KUBERNETES_VERSIONS, pytest.param(REAL, marks=[pytest.mark.k8s, K8S_TIMEOUT])]


def require_cluster(release: Release) -> None:
    """Skip (or, under ``CI=true``, fail) when the real control plane cannot start."""
    reason = missing_binaries(release)
    if not reason:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the real cluster: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def k8s_release(request: pytest.FixtureRequest) -> Release:
    """The release a ``k8s`` test runs on (tests/conftest.py parametrises it)."""
    param = getattr(request, "param", None)
    return param if isinstance(param, Release) else default_release()


@pytest.fixture(scope="session")
def k8s_clusters() -> Iterator[ClusterPool]:
    """The control planes of the session, one per release, each started on first use."""
    pool = ClusterPool()
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def k8s_cluster(k8s_clusters: ClusterPool, k8s_release: Release) -> Cluster:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler of the test's release."""
    require_cluster(k8s_release)
    return k8s_clusters.get(k8s_release)


@pytest.fixture
def k8s_api(k8s_cluster: Cluster) -> Iterator[ClusterApi]:
    """Admin access to the session's cluster; what the test made is removed after it."""
    api = ClusterApi(k8s_cluster)
    api.reset()
    yield api
    api.reset()


@pytest.fixture(params=BACKENDS)
async def apiserver(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == REAL:
        marker = request.node.get_closest_marker("stand_in_only")
        if marker is not None:
            pytest.skip(f"stand-in only: {marker.args[0]}")
        yield request.getfixturevalue("k8s_api")
        return
    async with ApiServer(kubernetes_version=request.param) as server:
        yield server


@pytest.fixture
def metrics() -> DriverMetrics:
    return DriverMetrics()


@pytest.fixture
async def client(apiserver: Any, metrics: DriverMetrics) -> AsyncIterator[kube.KubeClient]:
    settings = kube.KubeSettings(retry_backoff=(0.01, 0.01, 0.01), conflict_backoff=(0.0,) * 5)
    if isinstance(apiserver, ClusterApi):
        connected = await kube.connect(
            kubeconfig=apiserver.driver_kubeconfig(), settings=settings, metrics=metrics
        )
    else:
        connected = await kube.connect(url=apiserver.url, settings=settings, metrics=metrics)
    async with connected as c:
        yield c
