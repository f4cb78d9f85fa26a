"""The collector pause used around bulk decoding: nests, and restores what it found."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from dralet import gcpause


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
