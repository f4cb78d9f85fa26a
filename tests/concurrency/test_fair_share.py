"""No call can starve another: claims of every call in flight share the prepare slots in
turn, and a call answers whatever it could not finish within its budget as retryable."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims.group import FairSlots
from tests.recovery.nodekit import EngineNode

BIG = 20_000
BOUND = 60.0
"""A bounded wait, not a speed goal: the small call must finish while the big one runs."""


async def test_a_one_claim_call_is_not_held_up_by_a_call_with_20000_claims(
    tmp_path: Path,
) -> None:
    # The budget keeps the test short: what the big call cannot reach in it is answered
    # retryable, which is the other half of the promise.
    node = EngineNode.create(tmp_path, max_parallel_claims=4, call_budget=5.0)
    small = node.add_claim("small", "gpu-0")
    # Claims the API does not know: each is answered with an error after a real lookup
    # and a real claim lock, so the big call keeps its slots busy the whole time.
    unknown = [ClaimRef(ClaimUID(str(uuid.uuid4())), "default", f"big-{i}") for i in range(BIG)]
    started = asyncio.Event()
    lookup = node.claims.get_claim

    async def get_claim(namespace: str, name: str) -> Any:
        started.set()
        return await lookup(namespace, name)

    node.claims.get_claim = get_claim  # type: ignore[method-assign]
    big_call = asyncio.create_task(node.engine.prepare(unknown))
    await started.wait()  # the big call is running
    small_call = asyncio.create_task(node.engine.prepare([small]))
    done, _ = await asyncio.wait(
        {small_call, big_call}, timeout=BOUND, return_when="FIRST_COMPLETED"
    )
    assert small_call in done
    assert not big_call.done(), "the small call finished only after the big one"
    assert small_call.result()[small.uid].error == ""
    outcomes = await big_call
    assert len(outcomes) == BIG
    assert all("not found" in o.error or o.error.endswith("; retry") for o in outcomes.values())
    # Answered at its budget, the big call's group in flight still ends after the answer.
    await node.engine.settled()


async def test_claims_not_finished_within_the_budget_are_answered_retryable(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path, call_budget=0.0)
    a = node.add_claim("a", "gpu-0")
    outcome = (await node.prepare(a))[a.uid]
    assert outcome.error.endswith("retry")
    await node.engine.settled()  # a claim not started by the deadline is never started
    assert node.record(a) is None and node.held_by(a) == []


async def test_a_freed_slot_goes_to_the_next_call_in_turn() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    gate = asyncio.Event()

    async def claim(call: str, n: int) -> None:
        await slots.acquire(call)
        try:
            order.append(f"{call}{n}")
            await gate.wait()
        finally:
            slots.release()

    tasks = [asyncio.create_task(claim("big", n)) for n in range(4)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(claim("small", 0)))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    assert order[:3] == ["big0", "big1", "small0"]
