"""Fixtures shared by the API suites: an API stand-in per Kubernetes version (1.32:
v1beta1 only; 1.34: v1) and a ``KubeClient`` connected to it over HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dralet import kube
from dralet.metrics import DriverMetrics
from dralet.testing.apiserver import ApiServer

KUBERNETES_VERSIONS = ["1.32", "1.34"]


@pytest.fixture(params=KUBERNETES_VERSIONS)
async def apiserver(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    async with ApiServer(kubernetes_version=request.param) as server:
        yield server


@pytest.fixture
def metrics() -> DriverMetrics:
    return DriverMetrics()


@pytest.fixture
async def client(apiserver: ApiServer, metrics: DriverMetrics) -> AsyncIterator[kube.KubeClient]:
    settings = kube.KubeSettings(retry_backoff=(0.01, 0.01, 0.01), conflict_backoff=(0.0,) * 5)
    async with await kube.connect(url=apiserver.url, settings=settings, metrics=metrics) as c:
        yield c
