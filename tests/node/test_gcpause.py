"""The collector pause used around bulk work: nests, and restores what it found."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet import gcpause
from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from dralet.testing import MemoryClaims, MemoryDevices, allocated_claim, running_node
from dralet.testing.node import node_settings


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_pauses_enable_the_collector_when_the_last_one_ends() -> None:
    inner_started, outer_done = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_thread() -> None:
        with gcpause.paused():
            inner_started.set()
            outer_done.wait(5)
            seen.append(gc.isenabled())  # the first pause ended, this one has not

    with gcpause.paused():
        worker = threading.Thread(target=other_thread)
        worker.start()
        assert inner_started.wait(5)
        assert not gc.isenabled()
    outer_done.set()
    worker.join(5)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with gcpause.paused():
        pass
    assert not gc.isenabled()


def test_an_exception_inside_still_ends_the_pause() -> None:
    with pytest.raises(ValueError, match="boom"), gcpause.paused():
        raise ValueError("boom")
    assert gc.isenabled()


async def test_a_call_of_many_claims_runs_with_the_collector_paused(tmp_path: Path) -> None:
    """A large NodePrepareResources call pauses the collector while its claims are
    prepared and restores it once answered; a call of one claim leaves it alone."""
    seen: list[bool] = []

    class Watching(MemoryDevices):
        async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
            seen.append(gc.isenabled())
            return await super().prepare(claim, device)

    claims = MemoryClaims()
    many = [claims.add(allocated_claim(f"c{i}", devices=[("gpu", f"gpu-{i}")])) for i in range(40)]
    one = claims.add(allocated_claim("solo", devices=[("gpu", "gpu-40")]))
    async with running_node(node_settings(tmp_path), Watching(41), claims=claims) as node:
        assert (await node.prepare(*many)).kubelet_error == ""
        assert gc.isenabled()
        assert seen == [False] * 40
        seen.clear()
        assert (await node.prepare(one)).kubelet_error == ""
        assert seen == [True]
