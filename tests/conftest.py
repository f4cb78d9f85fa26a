"""Shared fixtures: a per-test task-leak check, temporary node directories and the real
Kubernetes control plane (one per session, started by the first test that needs it)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dralet import failpoints
from tests.kubefixtures import k8s_api, k8s_cluster

__all__ = ["k8s_api", "k8s_cluster"]


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
