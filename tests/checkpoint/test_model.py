"""Record copies: ``evolve`` changes what it is asked to and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from dralet.checkpoint.allocated import AllocatedDevice
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord, evolve

GPU = AllocatedDevice(request="gpu", pool="node-a", device="gpu-0")


def _record() -> ClaimRecord:
    return ClaimRecord(
        uid="uid-1",
        namespace="default",
        name="claim-1",
        state=ClaimState.PREPARE_STARTED,
        devices=(DeviceRecord(GPU, request_names=("gpu",)),),
    )


def test_evolve_is_replace_without_its_cost() -> None:
    record = _record()
    changed = evolve(record, state=ClaimState.PREPARE_COMPLETED, updated_at="now")
    assert changed == dataclasses.replace(
        record, state=ClaimState.PREPARE_COMPLETED, updated_at="now"
    )
    assert record.state is ClaimState.PREPARE_STARTED and record.updated_at == ""
    assert type(changed) is ClaimRecord
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.state = ClaimState.RELEASED  # type: ignore[misc]


def test_evolve_refuses_a_field_the_type_lacks() -> None:
    with pytest.raises(TypeError, match="has no field 'stat'"):
        evolve(_record(), stat=ClaimState.RELEASED)
    device = _record().devices[0]
    assert evolve(device, request_names=("a", "b")).request_names == ("a", "b")
    with pytest.raises(TypeError, match="DeviceRecord has no field"):
        evolve(device, uid="x")
