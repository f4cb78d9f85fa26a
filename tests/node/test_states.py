"""The claim lifecycle table in code, and the account of it in docs/how-it-works.md, agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from dralet.node.backend import AllocatedDevice, DeviceConfig
from dralet.node.claims import records

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-it-works.md"


def _docs_block() -> list[str]:
    text = PAGE.read_text()
    match = re.search(r"## What dralet does for each claim\n\n```\n(.*?)```", text, re.S)
    assert match, "docs/how-it-works.md lost its 'What dralet does for each claim' section"
    return match.group(1).rstrip("\n").split("\n")


def test_the_docs_list_the_steps_in_the_order_of_the_table() -> None:
    assert _docs_block() == records.lifecycle_lines()


def test_the_table_is_one_chain_from_none_to_gone() -> None:
    phase = records.Phase.NONE
    for transition in records.TRANSITIONS:
        assert transition.before is phase
        phase = transition.after
    assert phase is records.Phase.GONE


def test_the_record_proves_how_far_a_prepare_got() -> None:
    device = DeviceRecord(AllocatedDevice(request="r", pool="p", device="gpu-0"))
    record = ClaimRecord("u", "ns", "c", ClaimState.PREPARE_STARTED, devices=(device,))
    assert records.phase_of(None) is records.Phase.NONE
    assert records.phase_of(record) is records.Phase.PREPARE_STARTED
    prepared = record.with_state(
        ClaimState.PREPARE_STARTED, devices=(device.with_prepared_state({"k": 1}),)
    )
    assert records.phase_of(prepared) is records.Phase.DEVICE_PREPARED
    assert records.phase_of(prepared, spec_present=True) is records.Phase.SPEC_WRITTEN
    assert records.phase_of(record.with_state(ClaimState.RELEASED)) is records.Phase.RELEASED


def test_device_state_and_config_are_kept_apart() -> None:
    config = DeviceConfig("claim", (), {"a": 1})
    device = DeviceRecord(AllocatedDevice(request="r", pool="p", device="gpu-0", configs=(config,)))
    assert not device.prepared
    assert device.prepared_state == {}
    done = device.with_prepared_state({"config": "backend's own key"})
    assert done.prepared
    assert done.allocated.config == ({"a": 1},)
    assert done.prepared_state == {"config": "backend's own key"}
    assert done.with_prepared_state({}).prepared  # an empty state is a returned prepare


def test_every_failpoint_of_the_routes_is_named_by_the_table_and_declared() -> None:
    from dralet import failpoints
    from dralet.node.claims import prepare, teardown

    named = [point for t in records.TRANSITIONS for point in t.failpoints]
    assert len(named) == len(set(named))
    assert set(named) <= failpoints.known()
    assert all(point.startswith(("claim.prepare.", "claim.unprepare.")) for point in named)
    used = {
        value
        for module in (prepare, teardown)
        for name, value in vars(module).items()
        if name.startswith("FP_")
    }
    assert used == set(named)


def test_a_record_moves_only_along_the_table() -> None:
    record = ClaimRecord("u", "ns", "c", ClaimState.PREPARE_STARTED)
    completed = records.moved(record, ClaimState.PREPARE_COMPLETED)
    assert completed.state is ClaimState.PREPARE_COMPLETED
    # A rollback goes down from a prepare that never completed.
    assert records.moved(record, ClaimState.UNPREPARE_STARTED).state is (
        ClaimState.UNPREPARE_STARTED
    )
    down = records.moved(completed, ClaimState.UNPREPARE_STARTED)
    assert records.moved(down, ClaimState.RELEASED).state is ClaimState.RELEASED
    for before, after in (
        (completed, ClaimState.PREPARE_STARTED),
        (completed, ClaimState.RELEASED),
        (down, ClaimState.PREPARE_COMPLETED),
        (records.moved(down, ClaimState.RELEASED), ClaimState.UNPREPARE_STARTED),
    ):
        with pytest.raises(records.TransitionError):
            records.moved(before, after)
