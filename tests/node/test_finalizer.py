"""The driver-owned finalizer stays on a ResourceClaim exactly until teardown is confirmed;
stale claims are cleaned up after a grace period through the normal unprepare path.
"""

from __future__ import annotations

import asyncio

from dralet.checkpoint.model import ClaimState
from dralet.testing.claims import allocated_claim
from tests.node.conftest import Node
from tests.node.test_prepare import kclaim

FINALIZER = "gpu.example.com/prepared"


async def test_finalizer_present_exactly_while_prepared(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    assert node.claims.finalizers("default", "c1") == []
    await node.plugin.prepare([kclaim(claim)])
    assert node.claims.finalizers("default", "c1") == [FINALIZER]
    calls = node.claims.calls
    assert calls.index("add-finalizer default/c1") < len(calls)  # added during prepare
    await node.plugin.unprepare([kclaim(claim)])
    await node.driver.engine.settled()
    assert node.claims.finalizers("default", "c1") == []


async def test_finalizer_is_removed_only_after_spec_unlink_and_release(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    await node.plugin.prepare([kclaim(claim)])
    spec = node.settings.cdi_dir / f"gpu.example.com-claim_{uid}.json"
    original = node.claims.remove_finalizer
    observed: list[tuple[bool, dict[str, str]]] = []

    async def observing(*args: str) -> bool:
        observed.append((spec.exists(), node.backend.in_use()))
        return await original(*args)

    node.claims.remove_finalizer = observing  # type: ignore[method-assign]
    await node.plugin.unprepare([kclaim(claim)])
    await node.driver.engine.settled()
    assert observed == [(False, {})]


async def test_deleted_claim_is_held_until_teardown_then_disappears(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    await node.plugin.prepare([kclaim(claim)])
    node.claims.delete("default", "c1")
    held = node.claims.objects[("default", "c1")]
    assert held["metadata"]["deletionTimestamp"]
    assert node.backend.in_use()  # still prepared: the claim must not vanish yet
    await node.plugin.unprepare([kclaim(claim)])
    await node.driver.engine.settled()
    assert ("default", "c1") not in node.claims.objects


async def test_claim_already_gone_at_unprepare_needs_no_api(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    await node.plugin.prepare([kclaim(claim)])
    del node.claims.objects[("default", "c1")]  # force-deleted, finalizer stripped
    result = await node.plugin.unprepare([kclaim(claim)])
    assert result.kubelet_error == ""
    assert node.backend.in_use() == {}
    await node.driver.engine.settled()
    assert node.driver.engine.known_claims() == {}


async def test_finalizer_removal_failure_does_not_fail_unprepare_and_is_retried(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    await node.plugin.prepare([kclaim(claim)])
    node.claims.fail_finalizer_removal = True
    result = await node.plugin.unprepare([kclaim(claim)])
    assert result.kubelet_error == ""  # teardown is done; only the API is behind
    assert node.backend.in_use() == {}
    await node.driver.engine.settled()
    assert node.driver.engine.known_claims()[uid].state == ClaimState.RELEASED
    assert node.claims.finalizers("default", "c1") == [FINALIZER]
    node.claims.fail_finalizer_removal = False
    assert await node.driver.engine.collect_stale() == []
    assert node.claims.finalizers("default", "c1") == []
    assert node.driver.engine.known_claims() == {}


async def test_unprepare_is_answered_before_the_owed_finalizer_removal(node: Node) -> None:
    """The kubelet's answer follows the local, durable teardown: the finalizer removal
    is owed (a Released record, counted in the metrics) and done after the answer."""
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    await node.plugin.prepare([kclaim(claim)])
    original = node.claims.remove_finalizer
    api_answers = asyncio.Event()

    async def slow_api(*args: str) -> bool:
        await api_answers.wait()
        return await original(*args)

    node.claims.remove_finalizer = slow_api  # type: ignore[method-assign]
    result = await asyncio.wait_for(node.plugin.unprepare([kclaim(claim)]), timeout=30)
    assert result.kubelet_error == ""
    assert node.backend.in_use() == {}
    assert not list(node.settings.cdi_dir.glob("*.json"))
    assert node.driver.engine.known_claims()[uid].state == ClaimState.RELEASED
    assert node.claims.finalizers("default", "c1") == [FINALIZER]
    owed = node.driver.metrics.finalizer_removals_owed
    assert owed.collect()[0].samples[0].value == 1
    api_answers.set()
    await node.driver.engine.settled()
    assert node.claims.finalizers("default", "c1") == []
    assert node.driver.engine.known_claims() == {}
    assert owed.collect()[0].samples[0].value == 0


async def test_stale_claim_is_cleaned_only_after_the_grace_period(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    await node.plugin.prepare([kclaim(claim)])
    # The claim is replaced behind the kubelet's back: same name, new UID.
    del node.claims.objects[("default", "c1")]
    node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-3")]))
    ledger = node.driver.engine
    grace = node.settings.stale_claim_grace
    assert await ledger.collect_stale(now=1000.0) == []
    assert await ledger.collect_stale(now=1000.0 + grace / 2) == []
    assert node.backend.in_use() == {"gpu-0": uid}
    assert await ledger.collect_stale(now=1000.0 + grace + 1) == [uid]
    assert node.backend.in_use() == {}
    assert not list(node.settings.cdi_dir.glob("*.json"))
    cleanups = node.driver.metrics.stale_claim_cleanups._value.get()
    assert cleanups == 1


async def test_a_claim_that_recovers_within_the_grace_period_is_kept(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    await node.plugin.prepare([kclaim(claim)])
    saved = node.claims.objects.pop(("default", "c1"))
    ledger = node.driver.engine
    assert await ledger.collect_stale(now=0.0) == []
    node.claims.objects[("default", "c1")] = saved  # API blip: the claim is back
    assert await ledger.collect_stale(now=1.0) == []
    node.claims.objects.pop(("default", "c1"))
    grace = node.settings.stale_claim_grace
    assert await ledger.collect_stale(now=grace) == []  # the grace period starts again
    assert node.backend.in_use()


async def test_a_deleted_claim_no_pod_uses_is_stale(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    await node.plugin.prepare([kclaim(claim)])
    node.claims.delete("default", "c1")  # held by our finalizer
    node.claims.objects[("default", "c1")]["status"]["reservedFor"] = []
    ledger = node.driver.engine
    assert await ledger.collect_stale(now=0.0) == []
    grace = node.settings.stale_claim_grace
    assert await ledger.collect_stale(now=grace + 1) == [claim["metadata"]["uid"]]
    assert ("default", "c1") not in node.claims.objects  # finalizer gone, claim removed
    assert node.backend.in_use() == {}
