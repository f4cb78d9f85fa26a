"""The writer threads' hand-over: what the event loop submits in one turn reaches the
thread as one batch (one wake-up, one durable commit), and nothing is lost or stuck."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from dralet import errors
from dralet.batches import BatchThread, in_groups


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()

    def run(self, items: Sequence[int]) -> list[int | BaseException]:
        self.batches.append(list(items))
        self.threads.add(threading.current_thread().name)
        return [ValueError(f"item {i}") if i < 0 else i * 2 for i in items]


async def test_items_submitted_in_one_turn_run_as_one_batch() -> None:
    """Also when the loop gives the GIL away between the submissions (as a claim's
    syscalls do): the thread is not woken before the turn ends."""
    recorder = Recorder()
    thread = BatchThread("test-writer", recorder.run)

    async def submit_after_a_syscall(item: int) -> int:
        time.sleep(0.002)  # noqa: ASYNC251 - blocking on purpose: the GIL goes away
        return await thread.submit(item)

    try:
        results = await asyncio.gather(*(submit_after_a_syscall(i) for i in range(20)))
    finally:
        thread.stop()
    assert results == [i * 2 for i in range(20)]
    assert recorder.batches == [list(range(20))]
    assert recorder.threads == {"test-writer"}


async def test_a_batch_is_cut_at_max_batch_and_the_rest_runs_next() -> None:
    recorder = Recorder()
    thread = BatchThread("test-writer", recorder.run, max_batch=30)
    try:
        results = await asyncio.gather(*(thread.submit(i) for i in range(100)))
    finally:
        thread.stop()
    assert results == [i * 2 for i in range(100)]
    assert [len(b) for b in recorder.batches] == [30, 30, 30, 10]
    assert [i for b in recorder.batches for i in b] == list(range(100))


async def test_each_item_gets_its_own_failure() -> None:
    recorder = Recorder()
    thread = BatchThread("test-writer", recorder.run)
    try:
        results = await asyncio.gather(
            *(thread.submit(i) for i in (1, -1, 2)), return_exceptions=True
        )
        with pytest.raises(ValueError, match="item -3"):
            await thread.submit(-3)
    finally:
        thread.stop()
    assert results[0] == 2 and results[2] == 4
    assert isinstance(results[1], ValueError)


async def test_groups_share_a_batch_and_get_a_result_per_piece() -> None:
    """``in_groups``: each group is one item (one future); the pieces of every group
    waiting run in one call, and each piece gets its own result or failure."""
    recorder = Recorder()
    thread: BatchThread[Sequence[int], list[int | BaseException]] = BatchThread(
        "test-writer", in_groups(recorder.run), size=len, max_batch=3
    )
    try:
        first, second, third = await asyncio.gather(
            thread.submit([1, -1, 2]), thread.submit([]), thread.submit([3, 4])
        )
    finally:
        thread.stop()
    assert first[0] == 2 and isinstance(first[1], ValueError) and first[2] == 4
    assert second == [] and third == [6, 8]
    # A batch is counted in pieces, not groups: the first group fills it (3); the empty
    # group and the last one run in the next.
    assert recorder.batches == [[1, -1, 2], [3, 4]]


async def test_stop_runs_what_was_handed_over_and_refuses_more() -> None:
    recorder = Recorder()
    thread = BatchThread("test-writer", recorder.run)
    first = asyncio.ensure_future(thread.submit(1))
    await asyncio.sleep(0)  # the task submits
    await asyncio.sleep(0)  # the turn ends: handed over
    await asyncio.to_thread(thread.stop)
    assert await first == 2
    with pytest.raises(errors.TemporaryError, match="closed"):
        await thread.submit(2)


async def test_items_held_when_the_thread_stops_fail_as_temporary() -> None:
    recorder = Recorder()
    thread = BatchThread("test-writer", recorder.run)
    held = asyncio.ensure_future(thread.submit(1))
    await asyncio.sleep(0)  # submitted, not handed over yet
    thread.stop()
    with pytest.raises(errors.TemporaryError, match="closed"):
        await held
    assert recorder.batches == []
