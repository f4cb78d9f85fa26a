"""Claim locks shared by driver instances: one byte-range lock per claim in one file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dralet import fsutil


async def test_a_key_held_through_one_descriptor_blocks_another(tmp_path: Path) -> None:
    path = tmp_path / "claims.lock"
    first, second = fsutil.KeyedLocks(path), fsutil.KeyedLocks(path)  # two driver instances
    order: list[str] = []
    async with first.acquire("claim-a"):
        waiter = asyncio.create_task(_take(second, "claim-a", order))
        async with second.acquire("claim-b"):  # another key is free meanwhile
            order.append("b")
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert not waiter.done()
        order.append("a released")
    await asyncio.wait_for(waiter, 5)
    assert order == ["b", "a released", "a taken"]
    assert path.stat().st_size == 0  # locks take no space


async def test_closing_drops_the_locks_as_a_dead_process_does(tmp_path: Path) -> None:
    path = tmp_path / "claims.lock"
    dead, alive = fsutil.KeyedLocks(path), fsutil.KeyedLocks(path)
    held = dead.acquire("claim-a")
    await held.__aenter__()
    dead.close()
    async with asyncio.timeout(5), alive.acquire("claim-a"):
        pass


async def _take(locks: fsutil.KeyedLocks, key: str, order: list[str]) -> None:
    async with locks.acquire(key):
        order.append(f"{key[-1]} taken")
