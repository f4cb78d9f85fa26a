"""Calls on one claim in one driver process stay one at a time when the claim's lock is
handed from one holder to a waiter: the unprepare's owed finalizer removal, a prepare
woken when it ends, and an unprepare that comes while that prepare still works."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from tests.recovery.nodekit import EngineNode

WAIT = 5.0
LET_RUN = 1.0
"""How long the second unprepare is given to run ahead of the prepare it must wait for."""


async def test_a_call_arriving_after_a_hand_over_waits_for_the_woken_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = EngineNode.create(tmp_path, gpus=1)
    ref = node.add_claim("c0", "gpu-0")
    assert (await node.prepare(ref))[ref.uid].error == ""

    removal_entered, removal_go = asyncio.Event(), asyncio.Event()
    real_remove = node.claims.remove_finalizer

    async def remove_finalizer(*args: Any) -> bool:
        if not removal_go.is_set():
            removal_entered.set()
            await removal_go.wait()
        return await real_remove(*args)

    monkeypatch.setattr(node.claims, "remove_finalizer", remove_finalizer)
    device_entered, device_go = asyncio.Event(), asyncio.Event()
    real_prepare = node.backend.prepare

    async def prepare_device(claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        device_entered.set()
        await device_go.wait()
        return await real_prepare(claim, device)

    monkeypatch.setattr(node.backend, "prepare", prepare_device)
    store = node.engine.store
    real_lock = store.lock_claim
    lock_asked = asyncio.Event()

    async def lock_claim(uid: str) -> Any:
        lock_asked.set()
        return await real_lock(uid)

    async with asyncio.timeout(WAIT):
        # Answered, the claim Released: its finalizer removal owed holds the lock now.
        assert await node.engine.unprepare([ref]) == {ref.uid: ""}
        await removal_entered.wait()
        monkeypatch.setattr(store, "lock_claim", lock_claim)
        preparing = asyncio.create_task(node.prepare(ref))
        await lock_asked.wait()  # queued behind the removal
        monkeypatch.setattr(store, "lock_claim", real_lock)
        removal_go.set()  # the removal ends; the lock goes to the prepare
        await device_entered.wait()
    unpreparing = asyncio.create_task(node.engine.unprepare([ref]))
    await asyncio.wait([unpreparing], timeout=LET_RUN)
    device_go.set()
    async with asyncio.timeout(WAIT):
        prepared, unprepared = await asyncio.gather(preparing, unpreparing)
        await node.engine.settled()
    # One after the other: prepared, then torn down by the unprepare that came later.
    assert prepared[ref.uid].error == ""
    assert unprepared == {ref.uid: ""}
    node.assert_gone(ref)
    assert await node.findings() == []
    await node.engine.close()
