"""A claim's devices are built once, from the claim as read, and kept in its record:
the backend is handed those same devices on every call, never one rebuilt from the
record's fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dralet.checkpoint import codec
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import AllocatedDevice, ClaimRef, ClaimUID, DeviceConfig
from dralet.node.claims import records
from tests.recovery.nodekit import EngineNode

CLAIMS = 50
DEVICES_PER_CLAIM = 2


def _count_inits(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[object]:
    """Every instance of ``cls`` constructed from now on (copies made by ``evolve``
    bypass ``__init__`` and are not counted)."""
    made: list[object] = []
    real = cls.__init__

    def counting(self: object, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counting)
    return made


def _count_decoded(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every device decoded from a stored record from now on."""
    decoded: list[object] = []
    real = codec._device_from_dict

    def counting(value: Any) -> DeviceRecord:
        decoded.append(value)
        return real(value)

    monkeypatch.setattr(codec, "_device_from_dict", counting)
    return decoded


async def test_a_call_builds_each_device_once_and_no_backend_call_rebuilds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = EngineNode.create(tmp_path, gpus=CLAIMS * DEVICES_PER_CLAIM)
    refs = [
        node.add_claim(f"c{i}", *(f"gpu-{i * DEVICES_PER_CLAIM + j}" for j in range(2)))
        for i in range(CLAIMS)
    ]
    devices = CLAIMS * DEVICES_PER_CLAIM
    allocated = _count_inits(monkeypatch, AllocatedDevice)
    device_records = _count_inits(monkeypatch, DeviceRecord)
    decoded = _count_decoded(monkeypatch)

    prepared = await node.prepare(*refs)

    assert {outcome.error for outcome in prepared.values()} == {""}
    # One device per allocation result of the claim read, kept in one record each (and
    # one more per device any record read back from the store holds).
    assert len(allocated) == len(device_records) == devices + len(decoded)
    for made in (allocated, device_records, decoded):
        made.clear()

    assert set((await node.unprepare(*refs)).values()) == {""}
    # Unprepare has only the records it reads, and the store hands back the ones
    # prepare wrote (their rows unchanged): no device is built again, and
    # ``release_claim`` is handed the one the claim read built.
    assert len(decoded) == len(allocated) == len(device_records) == 0
    for ref in refs:
        node.assert_gone(ref)


def test_a_device_allocated_for_several_requests_is_one_record_handed_over_once() -> None:
    shared = DeviceConfig("claim", (), {"all": True})
    second = DeviceConfig("claim", ("b",), {"only": "b"})
    first_result = AllocatedDevice(
        request="b",
        subrequest="small",
        pool="p",
        device="gpu-0",
        configs=(shared, second),
        consumed_capacity={"memory": "1Gi"},
    )
    second_result = AllocatedDevice(
        request="a", pool="p", device="gpu-0", admin_access=True, configs=(shared,)
    )
    other = AllocatedDevice(request="a", pool="p", device="gpu-1", configs=(shared,))

    kept = records.device_records(
        "u", [first_result, second_result, other], [shared, second], cdi_kind="k/c"
    )

    merged, single = kept
    assert merged.request_names == ("a", "b")
    assert merged.cdi_device_ids == ("k/c=u-gpu-0",)
    # Handed over for the first name, with admin access if any result asked for it, the
    # configs of the last result and the other fields of the first.
    assert merged.allocated == AllocatedDevice(
        request="a",
        subrequest="small",
        pool="p",
        device="gpu-0",
        admin_access=True,
        configs=(shared,),
        consumed_capacity={"memory": "1Gi"},
    )
    assert single.allocated is other
    allocation = records.claim_allocation(ClaimRef(ClaimUID("u"), "ns", "c"), kept)
    assert allocation.devices == (merged.allocated, other)
    assert allocation.configs == (shared,)
