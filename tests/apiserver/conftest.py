"""The stand-in's own suite: only the stand-in backends of tests/kubefixtures.py."""

from collections.abc import AsyncIterator

import pytest

from dralet.apiserver import ApiServer
from tests.kubefixtures import KUBERNETES_VERSIONS, client, metrics

__all__ = ["KUBERNETES_VERSIONS", "apiserver", "client", "metrics"]


@pytest.fixture(params=KUBERNETES_VERSIONS)
async def apiserver(request: pytest.FixtureRequest) -> AsyncIterator[ApiServer]:
    async with ApiServer(kubernetes_version=request.param) as server:
        yield server
