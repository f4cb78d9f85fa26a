"""The errors the engine acts on: temporary ones are retried, per-claim and permanent ones
answered for that claim, an irreversible one is the only path to gRPC Internal; claim
references are checked at the gRPC edge with the one set of Kubernetes name rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from dralet import errors
from dralet.cdi.spec import ContainerEdits
from dralet.drivers.example import SimulatedGPUs
from dralet.node import service
from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from dralet.protocol.proto import dra_v1_pb2
from tests.recovery.nodekit import EngineNode


class Flaky(SimulatedGPUs):
    """Raises the queued errors from ``prepare``/``release`` first, then behaves."""

    def __init__(self, inner: SimulatedGPUs) -> None:
        super().__init__(state_dir=inner.state_dir, node_name=inner.node_name, count=inner.count)
        self.prepare_errors: list[Exception] = []
        self.release_errors: list[Exception] = []
        self.prepares = 0

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        self.prepares += 1
        if self.prepare_errors:
            raise self.prepare_errors.pop(0)
        return await super().prepare(claim, device)

    async def release(
        self, claim: ClaimRef, device: AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        if self.release_errors:
            raise self.release_errors.pop(0)
        await super().release(claim, device, state)


def _flaky(tmp_path: Path, **settings: Any) -> tuple[EngineNode, Flaky]:
    node = EngineNode.create(tmp_path, **settings)
    flaky = Flaky(node.backend)
    node.backend = flaky
    node.engine.backend = flaky
    node.engine.calls.backend = flaky
    return node, flaky


async def test_temporary_error_is_retried_by_the_engine(tmp_path: Path) -> None:
    node, flaky = _flaky(tmp_path)
    a = node.add_claim("a", "gpu-0")
    flaky.prepare_errors.append(errors.TemporaryError("device warming up", delay=0))
    assert (await node.prepare(a))[a.uid].error == ""
    assert flaky.prepares == 2
    node.assert_prepared(a, "gpu-0")


async def test_temporary_error_past_the_budget_is_answered_retryable(tmp_path: Path) -> None:
    node, flaky = _flaky(tmp_path)
    a = node.add_claim("a", "gpu-0")
    flaky.prepare_errors.append(errors.TemporaryError("device warming up", delay=3600))
    error = (await node.prepare(a))[a.uid].error
    assert "device warming up" in error and error.endswith("retry")
    node.assert_gone(a)


async def test_permanent_error_is_that_claims_answer_and_not_retried(tmp_path: Path) -> None:
    node, flaky = _flaky(tmp_path)
    a, b = node.add_claim("a", "gpu-0"), node.add_claim("b", "gpu-1")
    flaky.prepare_errors.append(errors.PermanentError("firmware too old"))
    outcomes = await node.prepare(a, b)
    assert sum("firmware too old" in o.error for o in outcomes.values()) == 1
    assert flaky.prepares == 2


class BadEdits(Flaky):
    """Prepares ``gpu-0`` with an environment entry the CDI library refuses."""

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        prepared = await super().prepare(claim, device)
        if device.device != "gpu-0":
            return prepared
        return PreparedDevice(edits=ContainerEdits(env=("NO_EQUALS_SIGN",)), state=prepared.state)


async def test_edits_no_runtime_would_load_fail_that_claim_and_leave_nothing(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    bad = BadEdits(node.backend)
    node.backend = node.engine.backend = node.engine.calls.backend = bad  # type: ignore[assignment]
    a, b = node.add_claim("a", "gpu-0"), node.add_claim("b", "gpu-1")
    outcomes = await node.prepare(a, b)
    assert "invalid environment variable 'NO_EQUALS_SIGN'" in outcomes[a.uid].error
    node.assert_gone(a)
    assert outcomes[b.uid].error == ""
    node.assert_prepared(b, "gpu-1")


async def test_irreversible_release_keeps_the_record_and_raises(tmp_path: Path) -> None:
    node, flaky = _flaky(tmp_path)
    a = node.add_claim("a", "gpu-0")
    assert (await node.prepare(a))[a.uid].error == ""
    flaky.release_errors.append(errors.IrreversibleError("device wedged"))
    with pytest.raises(errors.IrreversibleError):
        await node.unprepare(a)
    assert node.record(a) is not None  # nothing is forgotten: a person must look


class _Context:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        raise RuntimeError(details)


class _Engine:
    def __init__(self, exc: Exception | None = None) -> None:
        self.exc = exc
        self.seen: list[ClaimRef] = []

    async def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        self.seen.extend(refs)
        if self.exc is not None:
            raise self.exc
        return {r.uid: "" for r in refs}


def _request(*uids: str) -> Any:
    return SimpleNamespace(
        claims=[SimpleNamespace(namespace="default", uid=u, name="c") for u in uids]
    )


async def test_irreversible_is_the_only_path_to_internal() -> None:
    impl = service._DRAImplementation(
        _Engine(errors.IrreversibleError("wedged")),  # type: ignore[arg-type]
        pb2=dra_v1_pb2,
        with_share_id=True,
    )
    context = _Context()
    with pytest.raises(RuntimeError, match="wedged"):
        await impl.unprepare(_request("6f1c7c8e-0d7e-4c55-9a55-0c1b3f0e2a11"), context)
    assert context.code == grpc.StatusCode.INTERNAL


async def test_non_canonical_uid_gets_a_per_claim_error_under_the_key_sent() -> None:
    engine = _Engine()
    impl = service._DRAImplementation(
        engine,  # type: ignore[arg-type]
        pb2=dra_v1_pb2,
        with_share_id=True,
    )
    good = "6f1c7c8e-0d7e-4c55-9a55-0c1b3f0e2a11"
    upper = good.upper()
    response = await impl.unprepare(_request(good, upper), _Context())
    assert response.claims[good].error == ""
    assert "canonical" in response.claims[upper].error
    assert [r.uid for r in engine.seen] == [good]  # never re-keyed to the lower-case UID


def test_bad_claim_fields_refuse_the_whole_request() -> None:
    with pytest.raises(errors.InvalidRequestError, match="uid"):
        service.parse_claims(_request("not-a-uuid").claims)
