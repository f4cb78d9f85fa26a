"""The stand-in's own suite: the stand-in backends of tests/kubefixtures.py, and the
stand-in playing the current release (1.37) and the next (1.38, which serves no
resource.k8s.io/v1beta1), which the other suites meet as the real
kube-apiserver instead."""

from collections.abc import AsyncIterator

import pytest

from dralet.apiserver import ApiServer
from tests.kubefixtures import KUBERNETES_VERSIONS, client, metrics

__all__ = ["KUBERNETES_VERSIONS", "STAND_IN_VERSIONS", "apiserver", "client", "metrics"]

STAND_IN_VERSIONS = [*KUBERNETES_VERSIONS, "1.37", "1.38"]


@pytest.fixture(params=STAND_IN_VERSIONS)
async def apiserver(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    async with ApiServer(kubernetes_version=request.param) as server:
        yield server
