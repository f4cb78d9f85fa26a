"""A claim's lock: one holder at a time in the process and across driver instances, and
nothing left behind by a holder that finished, failed or was cancelled while waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dralet.metrics import DriverMetrics
from dralet.node.claims.store import RecordStore
from dralet.testing import node_settings


def _store(root: Path) -> RecordStore:
    return RecordStore(node_settings(root), boot_id="boot-1", metrics=DriverMetrics())


async def test_one_holder_at_a_time_and_no_lock_left_behind(tmp_path: Path) -> None:
    store = _store(tmp_path)
    order: list[str] = []

    async def hold(name: str) -> None:
        async with store.claim_lock("uid-a"):
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    await asyncio.gather(hold("first"), hold("second"))
    assert order == ["first in", "first out", "second in", "second out"]
    assert store._claim_locks == {}
    await store.close()


async def test_a_waiter_cancelled_leaves_the_lock_to_the_next(tmp_path: Path) -> None:
    store = _store(tmp_path)
    async with store.claim_lock("uid-a"):
        waiter = asyncio.create_task(_enter(store, "uid-a"))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert store._claim_locks == {}
    async with asyncio.timeout(5), store.claim_lock("uid-a"):
        pass
    await store.close()


async def test_another_instance_waits_for_the_claim(tmp_path: Path) -> None:
    first, second = _store(tmp_path), _store(tmp_path)  # two drivers on one node
    async with first.claim_lock("uid-a"):
        waiter = asyncio.create_task(_enter(second, "uid-a"))
        async with asyncio.timeout(5), second.claim_lock("uid-b"):
            pass  # another claim is free meanwhile
        await asyncio.sleep(0.05)
        assert not waiter.done()
    await asyncio.wait_for(waiter, 5)
    await first.close()
    await second.close()


async def test_a_body_that_raises_releases_both_locks(tmp_path: Path) -> None:
    store, other = _store(tmp_path), _store(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        async with store.claim_lock("uid-a"):
            raise RuntimeError("boom")
    assert store._claim_locks == {}
    async with asyncio.timeout(5), other.claim_lock("uid-a"):
        pass
    await store.close()
    await other.close()


async def _enter(store: RecordStore, uid: str) -> None:
    async with store.claim_lock(uid):
        pass


async def test_several_claims_locked_at_once_are_all_given_back(tmp_path: Path) -> None:
    store, other = _store(tmp_path), _store(tmp_path)
    held: list[str] = []

    async def hold_and_fail() -> None:
        async with store.claim_locks(["uid-c", "uid-a", "uid-b", "uid-a"]):
            held.extend(sorted(store._claim_locks))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await hold_and_fail()
    assert held == ["uid-a", "uid-b", "uid-c"]
    assert store._claim_locks == {}
    # Cancelled while waiting for the last: the ones it already took are given back too.
    async with other.claim_lock("uid-c"):
        waiter = asyncio.create_task(_enter_all(store, ["uid-a", "uid-b", "uid-c"]))
        await asyncio.sleep(0.05)
        assert sorted(store._claim_locks) == ["uid-a", "uid-b", "uid-c"]
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert store._claim_locks == {}
    async with asyncio.timeout(5), other.claim_locks(["uid-a", "uid-b", "uid-c"]):
        pass
    await store.close()
    await other.close()


async def _enter_all(store: RecordStore, uids: list[str]) -> None:
    async with store.claim_locks(uids):
        pass


async def test_a_lock_given_back_to_a_waiter_is_never_taken_by_a_newcomer_too(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    inside: list[str] = []
    first = await store.lock_claim("uid-a")

    async def enter(name: str) -> None:
        lock = await store.lock_claim("uid-a")
        inside.append(name)
        await asyncio.sleep(0.05)
        inside.remove(name)
        store.unlock_claim("uid-a", lock)

    waiter = asyncio.create_task(enter("waiter"))
    await asyncio.sleep(0)  # queued on the claim's lock
    store.unlock_claim("uid-a", first)  # handed to the waiter, which has not run yet
    newcomer = asyncio.create_task(enter("newcomer"))
    seen: set[int] = set()
    while not (waiter.done() and newcomer.done()):
        seen.add(len(inside))
        await asyncio.sleep(0.005)
    assert seen <= {0, 1}  # never both at once
    assert store._claim_locks == {}
    await store.close()
