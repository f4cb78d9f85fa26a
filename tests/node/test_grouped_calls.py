"""The claims of one call move through each step together. Prepare: one commit for all
their intents, their specs written as one group, one commit for their completions.
Unprepare: one commit for all their UnprepareStarted, their specs removed as one group,
one commit removing their records. A claim that fails at any step leaves the group and
is handled on its own; the others go on as if it had never been there."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dralet import errors, failpoints
from dralet.cdi.store import SpecStore
from dralet.checkpoint.model import ClaimState
from dralet.node.backend import ClaimRef
from dralet.node.claims import group, records
from dralet.node.claims.group import FairSlots, each, each_until_late
from tests.recovery.nodekit import EngineNode, SimulatedCrash, crash_at

CLAIMS = 6


def _node(tmp_path: Path, **settings: Any) -> tuple[EngineNode, list[ClaimRef]]:
    node = EngineNode.create(tmp_path, gpus=CLAIMS, **settings)
    return node, [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]


def _node_and_another(
    tmp_path: Path, **settings: Any
) -> tuple[EngineNode, list[ClaimRef], ClaimRef]:
    """``_node``, and one claim more (on a device of its own) for another call."""
    node = EngineNode.create(tmp_path, gpus=CLAIMS + 1, **settings)
    refs = [node.add_claim(f"c{i}", f"gpu-{i}") for i in range(CLAIMS)]
    return node, refs, node.add_claim("other", f"gpu-{CLAIMS}")


def _all_prepared(node: EngineNode, refs: list[ClaimRef]) -> None:
    for i, ref in enumerate(refs):
        node.assert_prepared(ref, f"gpu-{i}")


def _fail_when(
    monkeypatch: pytest.MonkeyPatch,
    owner: object,
    method: str,
    victim: ClaimRef,
    error: Exception | Callable[[], BaseException | None],
) -> None:
    """``owner.method`` (an async method whose first argument is the claim, or its
    namespace then name) raises for ``victim``; ``error`` may be a function giving the
    error for each call (None: this call goes through)."""
    real = getattr(owner, method)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        first = args[0]
        hit = first.uid == victim.uid if isinstance(first, ClaimRef) else args[1] == victim.name
        failure = (error() if callable(error) else error) if hit else None
        if failure is not None:
            raise failure
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, method, wrapped)


def _in_turn(*errors_: BaseException) -> tuple[list[int], Callable[[], BaseException | None]]:
    """An ``error`` for ``_fail_when`` raising ``errors_`` in turn, then letting every
    call through; and the list of the tries it saw."""
    tries: list[int] = []

    def error() -> BaseException | None:
        tries.append(len(tries))
        return errors_[len(tries) - 1] if len(tries) <= len(errors_) else None

    return tries, error


def _hang_until(
    monkeypatch: pytest.MonkeyPatch,
    owner: object,
    method: str,
    victim: ClaimRef,
    done: Callable[[], bool],
) -> list[bool]:
    """``owner.method`` (an async backend method) hangs for ``victim`` until ``done()``
    holds, 5 s at most, then goes on; the list gets what ``done()`` was by then."""
    seen: list[bool] = []
    real = getattr(owner, method)

    async def hanging(claim: ClaimRef, *args: Any) -> Any:
        if claim.uid == victim.uid:
            for _ in range(100):
                if done():
                    break
                await asyncio.sleep(0.05)
            seen.append(done())
        return await real(claim, *args)

    monkeypatch.setattr(owner, method, hanging)
    return seen


@pytest.fixture
def spec_groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many claims each hand-over to the spec writer thread carried (for engines
    made after the fixture: a writer thread binds ``apply`` when it is made)."""
    groups: list[int] = []
    apply = SpecStore.apply

    def counted(self: SpecStore, changes: Any) -> Any:
        groups.append(len(changes))
        return apply(self, changes)

    monkeypatch.setattr(SpecStore, "apply", counted)
    return groups


async def test_one_call_makes_one_commit_per_step_and_one_group_of_specs(
    tmp_path: Path, spec_groups: list[int]
) -> None:
    node, refs = _node(tmp_path)
    before = node.engine.metrics.store_commits._value.get()
    outcomes = await node.prepare(*refs)
    assert all(o.error == "" for o in outcomes.values())
    # Intents, then completions: two commits however many claims.
    assert node.engine.metrics.store_commits._value.get() - before == 2
    assert spec_groups == [CLAIMS]
    _all_prepared(node, refs)


async def test_one_unprepare_call_makes_one_commit_per_step_and_one_group_of_removals(
    tmp_path: Path, spec_groups: list[int]
) -> None:
    node, refs = _node(tmp_path)
    assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    spec_groups.clear()
    before = node.engine.metrics.store_commits._value.get()
    assert await node.unprepare(*refs) == {ref.uid: "" for ref in refs}
    # UnprepareStarted, Released (the answer; the finalizer removals owed), then the
    # records' removal: three commits however many claims.
    assert node.engine.metrics.store_commits._value.get() - before == 3
    assert spec_groups == [CLAIMS]
    for ref in refs:
        node.assert_gone(ref)


async def test_an_unprepare_calls_owed_finalizer_removals_begin_once_it_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two slots, so the call runs in three groups: the first groups' removals wait for
    # the last group's answer instead of taking the CPU its teardown needs.
    node, refs = _node(tmp_path, max_parallel_claims=2)
    assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    answered: list[bool] = []
    call_over = False
    real = node.claims.remove_finalizer

    async def remove(*args: Any) -> Any:
        answered.append(call_over)
        return await real(*args)

    monkeypatch.setattr(node.claims, "remove_finalizer", remove)
    assert await node.engine.unprepare(refs) == {ref.uid: "" for ref in refs}
    call_over = True
    await node.engine.settled()
    assert answered == [True] * CLAIMS
    for ref in refs:
        node.assert_gone(ref)


@pytest.mark.parametrize("step", ["release", "finalizer"])
async def test_a_claim_failing_at_an_unprepare_step_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    node, refs = _node(tmp_path)
    assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    victim = refs[2]
    if step == "release":
        _fail_when(
            monkeypatch, node.backend, "release", victim, RuntimeError("device stuck in reset")
        )
    else:
        _fail_when(monkeypatch, node.claims, "remove_finalizer", victim, ConnectionError("refused"))
    errors_by_claim = await node.unprepare(*refs)
    for ref in refs:
        if ref != victim:
            assert errors_by_claim[ref.uid] == ""
            node.assert_gone(ref)
    record = node.record(victim)
    assert record is not None
    if step == "release":
        assert "device stuck in reset" in errors_by_claim[victim.uid]
        assert record.state == "UnprepareStarted"  # released by the kubelet's retry
        assert node.held_by(victim) == ["gpu-2"]
    else:
        # The devices are free; the finalizer's removal is retried, not failed.
        assert errors_by_claim[victim.uid] == ""
        assert record.state == "Released"
        assert node.held_by(victim) == []
    assert not node.spec_path(victim).exists()
    monkeypatch.undo()
    assert (await node.unprepare(victim))[victim.uid] == ""
    node.assert_gone(victim)


class _Faults:
    """Makes claim ``c2`` fail at one step; every other claim goes through."""

    def __init__(self, node: EngineNode, monkeypatch: pytest.MonkeyPatch) -> None:
        self.node = node
        self.monkeypatch = monkeypatch
        self.victim = node.refs["c2"]

    def read(self) -> None:
        self._fail(self.node.claims, "get_claim", ConnectionError("API server unreachable"))

    def finalizer(self) -> None:
        self._fail(self.node.claims, "add_finalizer", ConnectionError("patch refused"))

    def backend(self) -> None:
        self._fail(self.node.backend, "prepare", RuntimeError("device fell off the bus"))

    def _fail(self, owner: object, method: str, error: Exception) -> None:
        _fail_when(self.monkeypatch, owner, method, self.victim, error)

    def spec(self) -> None:
        # A directory where the claim's spec goes: that one write is refused.
        self.node.spec_path(self.victim).mkdir(parents=True)

    def failpoint(self) -> None:
        # The third claim to pass the step (in UID order within the call) errors.
        failpoints.arm(records.FP_AFTER_BACKEND_PREPARE, "error", nth=3)


@pytest.fixture
def disarmed() -> Iterator[None]:
    yield
    failpoints.disarm()


@pytest.mark.parametrize("step", ["read", "finalizer", "backend", "spec", "failpoint"])
async def test_a_claim_failing_at_any_step_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, disarmed: None
) -> None:
    node, refs = _node(tmp_path)
    faults = _Faults(node, monkeypatch)
    getattr(faults, step)()
    outcomes = await node.prepare(*refs)
    failed = [ref for ref in refs if outcomes[ref.uid].error]
    assert len(failed) == 1, {r.name: outcomes[r.uid].error for r in refs}
    if step != "failpoint":
        assert failed == [faults.victim]
    (victim,) = failed
    assert outcomes[victim.uid].devices == ()
    if step == "spec":
        node.spec_path(victim).rmdir()
    node.assert_gone(victim)
    for i, ref in enumerate(refs):
        if ref != victim:
            node.assert_prepared(ref, f"gpu-{i}")
            assert outcomes[ref.uid].devices[0].device == f"gpu-{i}"


async def test_the_finalizers_are_added_while_the_backend_prepares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each claim's finalizer patch answers only once the backend prepares its device:
    # done one after the other, the call would wait the patches out and fail them.
    node, refs = _node(tmp_path)
    preparing: dict[str, asyncio.Event] = {ref.name: asyncio.Event() for ref in refs}
    real_prepare, real_add = node.backend.prepare, node.claims.add_finalizer

    async def prepare(claim: ClaimRef, *args: Any) -> Any:
        preparing[claim.name].set()
        return await real_prepare(claim, *args)

    async def add_finalizer(namespace: str, name: str, *args: Any, **kwargs: Any) -> Any:
        await asyncio.wait_for(preparing[name].wait(), timeout=2)
        return await real_add(namespace, name, *args, **kwargs)

    monkeypatch.setattr(node.backend, "prepare", prepare)
    monkeypatch.setattr(node.claims, "add_finalizer", add_finalizer)
    outcomes = await node.prepare(*refs)
    assert {o.error for o in outcomes.values()} == {""}
    _all_prepared(node, refs)
    for ref in refs:
        assert node.finalizers(ref) != []


async def test_a_claim_whose_finalizer_is_refused_during_a_late_prepare_is_torn_down_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # c2's finalizer is refused while its backend prepare hangs past its group's: the
    # teardown waits for that prepare to return and releases what it prepared.
    monkeypatch.setattr(group, "LATE_AFTER", 0.05)
    node, refs = _node(tmp_path)
    victim = refs[2]
    _fail_when(monkeypatch, node.claims, "add_finalizer", victim, ConnectionError("refused"))
    returned: list[bool] = []
    real_prepare = node.backend.prepare

    async def slow(claim: ClaimRef, *args: Any) -> Any:
        if claim.uid == victim.uid:
            await asyncio.sleep(0.3)
            result = await real_prepare(claim, *args)
            returned.append(True)
            return result
        return await real_prepare(claim, *args)

    monkeypatch.setattr(node.backend, "prepare", slow)
    outcomes = await node.prepare(*refs)
    assert "refused" in outcomes[victim.uid].error
    assert returned == [True]
    node.assert_gone(victim)
    assert node.held_by(victim) == []
    for i, ref in enumerate(refs):
        if ref != victim:
            node.assert_prepared(ref, f"gpu-{i}")


async def test_a_claim_refused_at_its_intent_fails_alone(tmp_path: Path) -> None:
    node, refs = _node(tmp_path)
    holder = refs[0]
    assert (await node.prepare(holder))[holder.uid].error == ""
    rival = node.add_claim("rival", "gpu-0")  # allocated a device another claim holds
    outcomes = await node.prepare(*refs[1:], rival)
    assert "is still prepared for claim" in outcomes[rival.uid].error
    assert node.record(rival) is None and node.held_by(rival) == []
    _all_prepared(node, refs)


async def test_a_claim_failing_temporarily_is_prepared_again_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, refs = _node(tmp_path)
    tries, first_try_fails = _in_turn(errors.TemporaryError("still resetting", delay=0.01))
    _fail_when(monkeypatch, node.backend, "prepare", refs[3], first_try_fails)
    outcomes = await node.prepare(*refs)
    assert {o.error for o in outcomes.values()} == {""}
    assert len(tries) == 2
    _all_prepared(node, refs)


async def test_a_group_whose_locks_cannot_be_taken_goes_on_claim_by_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, refs = _node(tmp_path)
    store = node.engine.store
    real = store.claim_locks

    def refused(uids: Any) -> Any:
        if len(uids) > 1:
            raise OSError(5, "Input/output error")
        return real(uids)

    monkeypatch.setattr(store, "claim_locks", refused)
    outcomes = await node.prepare(*refs)
    assert {o.error for o in outcomes.values()} == {""}
    _all_prepared(node, refs)


@pytest.mark.parametrize(
    ("operation", "point"),
    [
        ("prepare", records.FP_AFTER_STARTED),
        ("prepare", records.FP_AFTER_FINALIZER),
        ("prepare", records.FP_AFTER_BACKEND_PREPARE),
        ("prepare", records.FP_AFTER_SPEC),
        ("unprepare", records.FP_AFTER_UNPREPARE_STARTED),
        ("unprepare", records.FP_AFTER_RELEASE),
        ("unprepare", records.FP_AFTER_FINALIZER_REMOVED),
    ],
)
async def test_a_kill_between_the_steps_of_a_group_leaves_nothing_after_a_start(
    tmp_path: Path, operation: str, point: str
) -> None:
    node, refs = _node(tmp_path)
    if operation == "unprepare":
        assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    with crash_at(point, nth=4), pytest.raises(SimulatedCrash):
        await getattr(node, operation)(*refs)
    engine = node.restart()
    await engine.recover()
    # An interrupted prepare is rolled back, an interrupted unprepare finished.
    for ref in refs:
        node.assert_gone(ref)
    assert await node.findings() == []
    outcomes = await node.prepare(*refs)  # the kubelet prepares them again from scratch
    assert {o.error for o in outcomes.values()} == {""}


async def test_a_group_is_as_large_as_the_slots_free_and_no_larger(tmp_path: Path) -> None:
    node, refs = _node(tmp_path, max_parallel_claims=4)
    sizes: list[int] = []
    real = node.engine.prepares.prepare_fresh_many

    async def sized(group: Any, **kwargs: Any) -> Any:
        sizes.append(len(group))
        return await real(group, **kwargs)

    node.engine.prepares.prepare_fresh_many = sized  # type: ignore[method-assign,assignment]
    outcomes = await node.prepare(*refs)
    assert {o.error for o in outcomes.values()} == {""}
    assert sizes == [4, 2]


async def test_each_keeps_to_its_limit_and_answers_every_item() -> None:
    in_flight = 0
    most = 0

    async def call(n: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1
        if n % 4 == 3:
            raise ValueError(f"item {n}")
        return n * 10

    found = await each(list(range(10)), call, limit=3)
    assert most == 3
    assert [f if isinstance(f, int) else str(f) for f in found] == [
        0,
        10,
        20,
        "item 3",
        40,
        50,
        60,
        "item 7",
        80,
        90,
    ]


async def test_acquire_some_takes_a_turn_then_only_what_is_free() -> None:
    slots = FairSlots(4)
    assert await slots.acquire_some("big", 10) == 4
    waiting = asyncio.ensure_future(slots.acquire_some("other", 10))
    await asyncio.sleep(0)
    assert not waiting.done()  # none free: it waits for its turn, holding nothing
    slots.release(4)
    # One slot came to it in its turn; the three others were free when it woke.
    assert await waiting == 4
    slots.release(4)
    assert await slots.acquire_some("big", 2) == 2


async def test_two_calls_wanting_many_slots_never_wait_on_each_other() -> None:
    slots = FairSlots(3)
    done: list[str] = []

    async def call(name: str, claims: int) -> None:
        while claims:
            held = await slots.acquire_some(name, claims)
            await asyncio.sleep(0)
            claims -= min(held, claims)
            slots.release(held)
        done.append(name)

    await asyncio.wait_for(asyncio.gather(*(call(f"call-{n}", 10) for n in range(5))), timeout=10)
    assert sorted(done) == [f"call-{n}" for n in range(5)]


async def test_a_claim_retrying_temporarily_holds_back_neither_its_call_nor_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # c0 fails temporarily until the budget ends. On its own slot it retries beside the
    # call's next group (c4, c5) and beside a call that comes meanwhile.
    node, refs, other = _node_and_another(tmp_path, max_parallel_claims=4, call_budget=1.0)
    prepared_meanwhile: list[bool] = []

    def still_resetting() -> Exception:
        prepared_meanwhile.append(
            all(node.record(ref) is not None for ref in (refs[4], refs[5], other))
        )
        return errors.TemporaryError("resetting", delay=0.05)

    _fail_when(monkeypatch, node.backend, "prepare", refs[0], still_resetting)

    async def later() -> str:
        await asyncio.sleep(0.2)
        return (await node.prepare(other))[other.uid].error

    outcomes, other_error = await asyncio.gather(node.prepare(*refs), later())
    assert await node.engine.work.drain(10)
    # Retryable either way: its last try may still be running when the budget ends.
    assert outcomes[refs[0].uid].error.endswith("retry")
    assert {outcomes[ref.uid].error for ref in refs[1:]} == {""}
    assert other_error == ""
    # The call's last group and the other call were done while c0 was still retrying.
    assert prepared_meanwhile[-1]
    for i, ref in enumerate(refs[1:], start=1):
        node.assert_prepared(ref, f"gpu-{i}")
    node.assert_prepared(other, f"gpu-{CLAIMS}")
    assert node.engine.scheduler._slots._free == 4  # every slot given back


async def test_claims_prepared_are_answered_before_a_slow_rollback_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # c0's prepare fails and its rollback outlasts the call's budget: the claims the
    # group prepared are answered as prepared, not as unfinished.
    node, refs = _node(tmp_path, call_budget=0.5)
    _fail_when(monkeypatch, node.backend, "prepare", refs[0], RuntimeError("fell off the bus"))
    real = node.backend.release

    async def slowly(*args: Any) -> Any:
        await asyncio.sleep(1.0)
        return await real(*args)

    monkeypatch.setattr(node.backend, "release", slowly)
    outcomes = await node.prepare(*refs)
    assert "not finished within the call's time budget" in outcomes[refs[0].uid].error
    assert {outcomes[ref.uid].error for ref in refs[1:]} == {""}
    assert await node.engine.work.drain(10)  # the rollback went on after the answer
    node.assert_gone(refs[0])
    for i, ref in enumerate(refs[1:], start=1):
        node.assert_prepared(ref, f"gpu-{i}")


async def test_an_irreversible_failure_is_the_answer_only_once_every_other_claim_has_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two slots, so the call runs in three groups. c0 fails, and its rollback cannot
    # release its device; c3 goes on alone after a temporary failure and takes a while.
    node, refs = _node(tmp_path, max_parallel_claims=2)
    tries: dict[str, int] = {}
    real_prepare = node.backend.prepare

    async def prepare(claim: ClaimRef, *args: Any) -> Any:
        tries[claim.uid] = tries.get(claim.uid, 0) + 1
        if claim.uid == refs[0].uid:
            raise RuntimeError("fell off the bus")
        if claim.uid == refs[3].uid and tries[claim.uid] == 1:
            raise errors.TemporaryError("resetting", delay=0.05)
        if claim.uid == refs[3].uid:
            await asyncio.sleep(0.3)
        return await real_prepare(claim, *args)

    monkeypatch.setattr(node.backend, "prepare", prepare)
    _fail_when(monkeypatch, node.backend, "release", refs[0], errors.IrreversibleError("wedged"))
    with pytest.raises(errors.IrreversibleError, match="wedged"):
        await node.prepare(*refs)
    # Every other claim was done, in every group, before the call answered Internal.
    for i, ref in enumerate(refs[1:], start=1):
        node.assert_prepared(ref, f"gpu-{i}")
    assert node.engine.scheduler._slots._free == 2


async def test_a_slot_waiter_cancelled_as_a_slot_comes_ends_cancelled() -> None:
    slots = FairSlots(1)
    assert await slots.acquire_some("a", 1) == 1
    waiter = asyncio.ensure_future(slots.acquire_some("b", 5))
    await asyncio.sleep(0)
    waiter.cancel()
    slots.release(1)  # in the same turn as the cancel
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await slots.acquire_some("c", 1) == 1  # the slot was passed on, not lost


async def test_a_group_whose_locks_fail_to_be_given_back_keeps_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The group's work is done when giving back one lock fails: its claims are not done
    # again one by one (a permanently failing claim would be tried twice).
    node, refs = _node(tmp_path)
    store = node.engine.store
    real_unlock = store.unlock_claim
    failed_once: list[str] = []

    def unlock(uid: str, lock: Any) -> None:
        real_unlock(uid, lock)
        if not failed_once:
            failed_once.append(uid)
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(store, "unlock_claim", unlock)
    tries: list[str] = []

    def refused() -> Exception:
        tries.append("c2")
        return errors.PermanentError("not supported on this device")

    _fail_when(monkeypatch, node.backend, "prepare", refs[2], refused)
    outcomes = await node.prepare(*refs)
    assert failed_once
    assert "not supported" in outcomes[refs[2].uid].error
    assert tries == ["c2"]
    for i, ref in enumerate(refs):
        if i != 2:
            node.assert_prepared(ref, f"gpu-{i}")


async def test_a_claim_whose_device_hangs_holds_back_neither_its_group_nor_another_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # c2's backend prepare hangs for a while. The rest of its group goes on without it
    # and gives its slots back, so a call that comes meanwhile is served before c2 ends.
    monkeypatch.setattr(group, "LATE_AFTER", 0.05)
    node, refs, other = _node_and_another(tmp_path, max_parallel_claims=CLAIMS)
    done_meanwhile = _hang_until(
        monkeypatch,
        node.backend,
        "prepare",
        refs[2],
        lambda: all(node.record(r) is not None for r in (*refs[:2], *refs[3:], other)),
    )

    async def later() -> str:
        await asyncio.sleep(0.2)
        return (await node.prepare(other))[other.uid].error

    outcomes, other_error = await asyncio.gather(node.prepare(*refs), later())
    assert {o.error for o in outcomes.values()} == {""}
    assert other_error == ""
    assert done_meanwhile == [True]
    _all_prepared(node, refs)
    node.assert_prepared(other, f"gpu-{CLAIMS}")
    assert node.engine.scheduler._slots._free == CLAIMS


async def test_each_until_late_leaves_only_calls_that_outlast_the_others() -> None:
    release = asyncio.Event()

    async def call(item: int) -> int:
        if item in (3, 7):
            await release.wait()
        if item == 5:
            raise ValueError("five")
        return item * 10

    found, late = await each_until_late(range(10), call, limit=4, patience=0.05)
    assert sorted(late) == [3, 7]
    assert [found[i] for i in (0, 1, 2, 4, 6, 8, 9)] == [0, 10, 20, 40, 60, 80, 90]
    assert isinstance(found[5], ValueError)
    release.set()
    assert [await late[3], await late[7]] == [30, 70]
    # Nothing late when every call ends in time.
    assert await each_until_late([1, 2], call, limit=4, patience=10) == ([10, 20], {})


async def test_a_claim_whose_release_hangs_holds_back_neither_its_group_nor_another_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group, "LATE_AFTER", 0.05)
    node, refs, other = _node_and_another(tmp_path, max_parallel_claims=CLAIMS)
    assert {o.error for o in (await node.prepare(*refs, other)).values()} == {""}
    gone_meanwhile = _hang_until(
        monkeypatch,
        node.backend,
        "release",
        refs[2],
        lambda: all(node.record(r) is None for r in (*refs[:2], *refs[3:], other)),
    )

    async def later() -> str:
        await asyncio.sleep(0.2)
        return (await node.unprepare(other))[other.uid]

    answers, other_error = await asyncio.gather(node.unprepare(*refs), later())
    assert answers == {ref.uid: "" for ref in refs}
    assert other_error == ""
    assert gone_meanwhile == [True]
    for ref in (*refs, other):
        node.assert_gone(ref)
    assert node.engine.scheduler._slots._free == CLAIMS


async def test_a_crash_on_the_one_claim_route_ends_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # c1 fails temporarily, goes on alone, and the process "dies" in its second try:
    # the call does not answer as if nothing happened.
    node, refs = _node(tmp_path)
    _, second_try_dies = _in_turn(errors.TemporaryError("resetting", delay=0.01), SimulatedCrash())
    _fail_when(monkeypatch, node.backend, "prepare", refs[1], second_try_dies)
    with pytest.raises(SimulatedCrash):
        await node.prepare(*refs)
    await node.restart().recover()
    assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    _all_prepared(node, refs)


async def test_a_late_call_is_cancelled_with_its_future_and_a_crash_in_it_reaches_it() -> None:
    hang, cancelled = asyncio.Event(), asyncio.Event()

    async def call(item: int) -> int:
        if item == 1:
            try:
                await hang.wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        if item == 2:
            await hang.wait()
            raise SimulatedCrash
        return item

    found, late = await each_until_late([0, 1, 2], call, limit=3, patience=0.05)
    assert found[0] == 0 and sorted(late) == [1, 2]
    late[1].cancel()
    await asyncio.wait_for(cancelled.wait(), timeout=5)
    hang.set()
    with pytest.raises(SimulatedCrash):
        await late[2]


async def test_cancelling_the_caller_of_each_until_late_waits_for_its_calls_to_stop() -> None:
    hang, cleaned_up = asyncio.Event(), asyncio.Event()

    async def call(item: int) -> int:
        if item == 1:
            try:
                await hang.wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)  # e.g. a backend giving a device back
                cleaned_up.set()
                raise
        return item

    caller = asyncio.ensure_future(each_until_late([0, 1], call, limit=2, patience=10))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # Nothing of the call runs on past its caller (whose claim locks it works under).
    assert cleaned_up.is_set()


async def test_no_group_of_an_unprepare_waits_on_the_finalizer_removals_it_owes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two claims a group: while the API holds every finalizer removal back, every group
    # of the call is still answered (the removals are owed, done in a task of their own).
    node, refs = _node(tmp_path, max_parallel_claims=2)
    assert {o.error for o in (await node.prepare(*refs)).values()} == {""}
    api_back = asyncio.Event()
    real = node.claims.remove_finalizer

    async def held_back(*args: Any, **kwargs: Any) -> bool:
        await api_back.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(node.claims, "remove_finalizer", held_back)
    answers = await asyncio.wait_for(node.engine.unprepare(refs), 5)
    assert answers == {ref.uid: "" for ref in refs}
    for ref in refs:
        record = node.record(ref)
        assert record is not None
        assert record.state is ClaimState.RELEASED
    api_back.set()
    await asyncio.wait_for(node.engine.settled(), 5)
    for ref in refs:
        node.assert_gone(ref)
