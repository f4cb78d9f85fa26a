"""Backend contract v2: claim-level prepare with the configs in precedence order and their
source, the same configs and each device's recorded state on release (after a restart
too), sync backends in a thread pool, per-call timeouts, devices shared by claims, and
records written before configs kept their source."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from dralet import errors
from dralet.cdi.spec import ContainerEdits
from dralet.checkpoint import codec
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimBackend,
    ClaimRef,
    ClaimUID,
    DeviceConfig,
    PreparedDevice,
)
from dralet.node.claims import records
from dralet.node.claims.calls import Invoker
from dralet.node.claims.records import claim_allocation
from dralet.testing.claims import DRIVER, allocated_claim
from tests.recovery.nodekit import EngineNode

OTHER = "other.example.com"


def _config(source: str, params: dict[str, Any], *requests: str, driver: str = DRIVER) -> Any:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {"driver": driver, "parameters": params},
    }


# As the API may list them: a claim config before a class config, one for another
# driver, one for a subrequest, one for another request.
API_CONFIGS = [
    _config("FromClaim", {"mode": "exclusive"}, "r0"),
    _config("FromClass", {"mode": "shared", "class": 1}),
    _config("FromClaim", {"mode": "other-driver"}, driver=OTHER),
    _config("FromClaim", {"sub": True}, "r0/small"),
    _config("FromClaim", {"mode": "r1-only"}, "r1"),
]


def test_configs_are_ordered_class_first_with_their_source_and_requests() -> None:
    configs = records.driver_configs({"devices": {"config": API_CONFIGS}}, DRIVER)
    assert configs == (
        DeviceConfig("class", (), {"mode": "shared", "class": 1}),
        DeviceConfig("claim", ("r0",), {"mode": "exclusive"}),
        DeviceConfig("claim", ("r0/small",), {"sub": True}),
        DeviceConfig("claim", ("r1",), {"mode": "r1-only"}),
    )
    assert [c.applies_to("r0/small") for c in configs] == [True, True, True, False]
    assert [c.applies_to("r0/big") for c in configs] == [True, True, False, False]


def _claim(name: str, devices: Sequence[tuple[str, str]], configs: list[Any]) -> dict[str, Any]:
    claim = allocated_claim(name, devices=devices)
    claim["status"]["allocation"]["devices"]["config"] = configs
    return claim


def _ref(claim: Mapping[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(ClaimUID(meta["uid"]), meta["namespace"], meta["name"])


class Recording:
    """A v2 backend around the example GPUs that keeps every call's allocation; its
    methods are sync or async as ``sync`` says."""

    def __init__(self, node: EngineNode) -> None:
        self.node = node
        self.prepared: list[ClaimAllocation] = []
        self.released: list[tuple[ClaimAllocation, list[Mapping[str, Any]]]] = []

    async def devices(self) -> Any:
        return await self.node.backend.devices()

    async def prepare_claim(self, allocation: ClaimAllocation) -> Sequence[PreparedDevice]:
        self.prepared.append(allocation)
        return await self.node.backend.prepare_claim(allocation)

    async def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        self.released.append((allocation, list(states)))
        await self.node.backend.release_claim(allocation, states)

    async def devices_in_use(self) -> Mapping[str, str]:
        return await self.node.backend.devices_in_use()

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return True

    async def health(self) -> Mapping[str, Any]:
        return {}


async def test_prepare_and_release_see_the_configs_in_precedence_order(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    recording = Recording(node)
    node.engine.backend = recording
    claim = node.claims.add(_claim("a", [("r0", "gpu-0"), ("r1", "gpu-1")], API_CONFIGS))
    ref = _ref(claim)
    assert (await node.prepare(ref))[ref.uid].error == ""
    (seen,) = recording.prepared
    class_config = DeviceConfig("class", (), {"mode": "shared", "class": 1})
    r0 = DeviceConfig("claim", ("r0",), {"mode": "exclusive"})
    r1 = DeviceConfig("claim", ("r1",), {"mode": "r1-only"})
    assert seen.configs == (class_config, r0, r1)
    assert [d.configs for d in seen.devices] == [(class_config, r0), (class_config, r1)]
    # The claim's config wins over the class's, though the API listed it first.
    spec = node.spec_path(ref).read_text()
    assert "EXAMPLE_GPU_0_MODE=exclusive" in spec
    assert "EXAMPLE_GPU_1_MODE=r1-only" in spec

    # A new process: the configs come back from the record, not from the API.
    node.restart()
    node.engine.backend = recording
    node.claims.objects.clear()
    assert await node.unprepare(ref) == {ref.uid: ""}
    ((released, states),) = recording.released
    assert released.configs == seen.configs
    assert [d.configs for d in released.devices] == [d.configs for d in seen.devices]
    assert states == [{"index": 0, "mode": "exclusive"}, {"index": 1, "mode": "r1-only"}]
    assert node.held_by(ref) == []


async def test_strict_backend_sees_configs_and_states_round_trip(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    claim = node.claims.add(_claim("a", [("r0", "gpu-0"), ("r1", "gpu-1")], API_CONFIGS))
    ref = _ref(claim)
    assert (await node.prepare(ref))[ref.uid].error == ""
    node.restart()
    assert await node.unprepare(ref) == {ref.uid: ""}
    assert node.strict is not None
    node.strict.assert_clean()


def test_a_record_from_before_config_sources_reads_as_claim_configs() -> None:
    stored = {
        "pool": "p",
        "device": "gpu-0",
        "requestNames": ["r"],
        "backendState": {"config": [{"a": 1}, {"a": 2}], "preparedState": {"index": 0}},
    }
    row = {"namespace": "default", "name": "c", "state": "PrepareCompleted", "devices": [stored]}
    record = codec.decode_record("u", json.dumps(row)).devices[0]
    device = record.allocated
    assert device.configs == (
        DeviceConfig("claim", (), {"a": 1}),
        DeviceConfig("claim", (), {"a": 2}),
    )
    assert device.config == ({"a": 1}, {"a": 2})
    ref = ClaimRef(ClaimUID("u"), "default", "c")
    assert claim_allocation(ref, [record]).configs == device.configs
    assert record.prepared_state == {"index": 0}


class Blocking:
    """A sync v2 backend: ``prepare_claim`` blocks its thread until ``go`` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.threads: list[int] = []
        self.released: list[list[Mapping[str, Any]]] = []
        self.holding: set[str] = set()

    def devices(self) -> list[Any]:
        return []

    def prepare_claim(self, allocation: ClaimAllocation) -> list[PreparedDevice]:
        self.threads.append(threading.get_ident())
        assert self.go.wait(timeout=30)
        self.holding.update(d.device for d in allocation.devices)
        return [PreparedDevice(edits=_edits(), state={"n": 1}) for _ in allocation.devices]

    def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        self.released.append(list(states))
        self.holding.difference_update(d.device for d in allocation.devices)

    def devices_in_use(self) -> dict[str, Any]:
        return {}

    def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return True

    def health(self) -> dict[str, Any]:
        return {}


def _edits() -> ContainerEdits:
    return ContainerEdits(env=("X=1",))


def _allocation() -> ClaimAllocation:
    ref = ClaimRef(ClaimUID("u1"), "default", "c")
    return ClaimAllocation(ref, (AllocatedDevice(request="r", pool="p", device="d0"),))


async def test_a_sync_backend_runs_in_a_thread() -> None:
    backend = Blocking()
    backend.go.set()
    invoker = Invoker(backend, timeout=30)
    (result,) = await invoker.prepare_claim(_allocation())
    assert result.state == {"n": 1}
    assert backend.threads and backend.threads[0] != threading.get_ident()


async def test_a_sync_call_past_its_timeout_is_temporary_and_blocks_the_claim_until_it_ends() -> (
    None
):
    backend = Blocking()
    invoker = Invoker(backend, timeout=0.05)
    with pytest.raises(errors.TemporaryError, match="did not return within"):
        await invoker.prepare_claim(_allocation())
    # The abandoned call still runs: a release now would race it, so it is refused.
    with pytest.raises(errors.TemporaryError, match="still running"):
        await invoker.release_claim(_allocation(), [{}])
    assert backend.released == []
    backend.go.set()
    for _ in range(200):  # bounded: the thread returns as soon as ``go`` is set
        if "u1" not in invoker._abandoned:
            break
        await asyncio.sleep(0.01)
    await invoker.release_claim(_allocation(), [{}])
    assert backend.released == [[{}]]
    assert backend.holding == set()


async def test_an_async_call_past_its_timeout_is_cancelled_rolled_back_and_retried(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path, backend_call_timeout=0.5)  # the asking again fits, loaded
    recording = Recording(node)
    node.engine.backend = recording
    gpus = node.backend
    cancelled = asyncio.Event()
    original = gpus.prepare

    async def hang_once(claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        if device.device == "gpu-1" and not cancelled.is_set():
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()
        return await original(claim, device)

    gpus.prepare = hang_once  # type: ignore[method-assign]
    a = node.add_claim("a", "gpu-0", "gpu-1")
    # The timeout is a temporary error: rolled back, then retried within the call budget.
    assert (await node.prepare(a))[a.uid].error == ""
    assert cancelled.is_set()
    node.assert_prepared(a, "gpu-0", "gpu-1")
    assert await node.unprepare(a) == {a.uid: ""}
    node.assert_gone(a)
    # The rollback released gpu-0, prepared before the hang, with the state its prepare
    # returned: the call's results were lost with it, so they were asked for again.
    rollback_states = recording.released[0][1]
    assert rollback_states == [{"index": 0}, {"index": 1}]


async def test_a_device_shared_by_claims_is_reported_for_each() -> None:
    backend = Blocking()
    backend.devices_in_use = lambda: {"d0": ["u1", "u2"], "d1": "u3", "d2": []}  # type: ignore[method-assign]
    assert await Invoker(backend).devices_in_use() == {
        "d0": frozenset({"u1", "u2"}),
        "d1": frozenset({"u3"}),
    }


async def test_an_orphan_holder_of_a_shared_device_is_found_beside_a_recorded_one(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0")
    assert (await node.prepare(a))[a.uid].error == ""
    gpus = node.backend
    original = gpus.devices_in_use

    async def shared() -> Mapping[str, Any]:
        held = dict(await original())
        return {**held, "gpu-0": [held["gpu-0"], "ghost-uid"]}

    gpus.devices_in_use = shared  # type: ignore[method-assign]
    findings = await node.findings()
    orphans = [f for f in findings if f.kind == "orphan-device"]
    assert [f.subject for f in orphans] == ["gpu-0"]
    assert "ghost-uid" in orphans[0].message
    assert not [f for f in findings if f.kind == "device-not-held"]


class RebootChecks:
    """``survives_reboot`` answers per device: ``d-gone`` did not survive, ``d-error``
    fails, ``d-hang`` blocks until ``go`` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.threads: set[int] = set()

    def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        self.threads.add(threading.get_ident())
        if device.device == "d-error":
            raise RuntimeError("cannot tell")
        if device.device == "d-hang":
            assert self.go.wait(timeout=30)
        return device.device != "d-gone"


class AsyncRebootChecks(RebootChecks):
    async def survives_reboot(  # type: ignore[override]
        self, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> bool:
        if device.device == "d-hang":
            await asyncio.sleep(30)
        return super().survives_reboot(device, state)


def _devices(*names: str) -> list[tuple[AllocatedDevice, Mapping[str, Any]]]:
    return [(AllocatedDevice(request="r", pool="p", device=name), {}) for name in names]


@pytest.mark.parametrize("kind", [RebootChecks, AsyncRebootChecks])
async def test_reboot_checks_of_many_devices_answer_each_alone(kind: type[RebootChecks]) -> None:
    backend = kind()
    answers = await Invoker(cast(ClaimBackend, backend), timeout=30).survives_reboot_many(
        _devices("d0", "d-gone", "d-error", "d1")
    )
    assert answers[0] is True and answers[1] is False and answers[3] is True
    assert isinstance(answers[2], RuntimeError)
    if kind is RebootChecks:  # one thread for all of them, not the event loop's
        assert len(backend.threads) == 1 and threading.get_ident() not in backend.threads


@pytest.mark.parametrize("kind", [RebootChecks, AsyncRebootChecks])
async def test_reboot_checks_unanswered_at_the_deadline_time_out(kind: type[RebootChecks]) -> None:
    backend = kind()
    answers = await Invoker(cast(ClaimBackend, backend), timeout=0.05).survives_reboot_many(
        _devices("d0", "d-hang", "d1")
    )
    backend.go.set()
    assert answers[0] is True
    assert isinstance(answers[1], errors.TemporaryError)
    assert "did not return within" in str(answers[1])
    if kind is RebootChecks:  # one after the other: those after the hang time out too
        assert isinstance(answers[2], errors.TemporaryError)
    else:  # concurrently: only the hung one
        assert answers[2] is True


async def test_async_reboot_checks_keep_to_the_backend_limit() -> None:
    in_flight = peak = 0

    class Counting:
        async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0)
            in_flight -= 1
            return device.device != "d-gone"

    names = [f"d{i}" for i in range(40)] + ["d-gone"]
    answers = await Invoker(cast(ClaimBackend, Counting()), timeout=30).survives_reboot_many(
        _devices(*names), limit=3
    )
    assert answers == [True] * 40 + [False]
    assert peak == 3
