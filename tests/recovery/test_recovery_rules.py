"""Recovery at start, one rule per test: each crash state ``ClaimEngine.recover`` must repair.

A crash is played with ``crash_at``: the failpoint raises a BaseException that no
cleanup catches, then a new ``ClaimEngine`` over the same directories (a new process) runs
recovery, and the kubelet's retry must then succeed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dralet.checkpoint.model import ClaimState
from tests.recovery.nodekit import FINALIZER, EngineNode, SimulatedCrash, crash_at

PREPARE_CRASH_POINTS = [
    "api.add-finalizer.after",
    "claim.prepare.after-finalizer",
    "backend.prepare.after",
    "claim.prepare.after-backend",
    "cdi.write.after-rename",
    "claim.prepare.after-spec",
]
UNPREPARE_CRASH_POINTS = [
    "claim.unprepare.after-started",
    "cdi.remove.after-unlink",
    "backend.release.after",
    "claim.unprepare.after-release",
]
OWED_CRASH_POINTS = [
    "claim.unprepare.answered-finalizer-owed",
    "api.remove-finalizer.before",
    "api.remove-finalizer.after",
]
"""After the kubelet's answer: the finalizer removal is owed, its Released record durable."""


@pytest.mark.parametrize("point", PREPARE_CRASH_POINTS)
async def test_prepare_started_is_rolled_back_and_retry_prepares_cleanly(
    tmp_path: Path, point: str
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0", "gpu-1")
    with crash_at(point), pytest.raises(SimulatedCrash):
        await node.prepare(a)
    record = node.record(a)
    assert record is not None
    assert record.state == ClaimState.PREPARE_STARTED

    report = await node.restart().recover()

    assert report.count("prepare-rolled-back") == 1
    node.assert_gone(a)  # backend released, spec unlinked, finalizer removed, record gone
    retried = (await node.prepare(a))[a.uid]
    assert retried.error == ""
    node.assert_prepared(a, "gpu-0", "gpu-1")
    assert await node.findings() == []


async def test_completed_claim_with_missing_spec_gets_it_rewritten_from_the_record(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-2")
    await node.prepare(a)
    content = node.spec_path(a).read_bytes()
    node.spec_path(a).unlink()

    report = await node.restart().recover()

    assert report.count("spec-rewritten") == 1
    assert node.spec_path(a).read_bytes() == content
    node.assert_prepared(a, "gpu-2")


@pytest.mark.parametrize("point", UNPREPARE_CRASH_POINTS)
async def test_unprepare_started_is_finished(tmp_path: Path, point: str) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0", "gpu-3")
    await node.prepare(a)
    with crash_at(point), pytest.raises(SimulatedCrash):
        await node.unprepare(a)
    record = node.record(a)
    assert record is not None
    assert record.state == ClaimState.UNPREPARE_STARTED

    report = await node.restart().recover()

    assert report.count("unprepare-finished") == 1
    node.assert_gone(a)
    assert await node.unprepare(a) == {a.uid: ""}  # the kubelet's retry: nothing left to do


@pytest.mark.parametrize("point", OWED_CRASH_POINTS)
async def test_an_owed_finalizer_removal_is_done_after_a_restart(
    tmp_path: Path, point: str
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0", "gpu-3")
    await node.prepare(a)
    with crash_at(point), pytest.raises(SimulatedCrash):
        await node.unprepare(a)
    record = node.record(a)
    assert record is not None
    assert record.state == ClaimState.RELEASED
    assert node.held_by(a) == []
    assert not node.spec_path(a).exists()

    report = await node.restart().recover()

    assert report.count("finalizer-retried") == 1
    node.assert_gone(a)
    assert await node.unprepare(a) == {a.uid: ""}


async def test_spec_of_ours_without_a_record_is_removed_and_others_are_kept(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0")
    await node.prepare(a)
    orphan = node.spec_path(a).with_name("gpu.example.com-claim_0000-orphan.json")
    shutil.copy(node.spec_path(a), orphan)
    foreign = node.settings.cdi_dir / "other.vendor.com-claim_0000-orphan.json"
    foreign.write_text(json.dumps({"kind": "other.vendor.com/claim"}))

    report = await node.restart().recover()

    assert report.count("orphan-spec-removed") == 1
    assert not orphan.exists()
    assert foreign.exists()  # another driver's file in a shared CDI dir is not ours
    node.assert_prepared(a, "gpu-0")


async def test_device_in_use_without_a_record_is_released(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-0")
    await node.prepare(a)
    lost = "11111111-2222-3333-4444-555555555555"
    node.backend.mark_in_use("gpu-3", lost)

    report = await node.restart().recover()

    assert report.count("orphan-device-released") == 1
    assert node.backend.in_use() == {"gpu-0": a.uid}
    node.assert_prepared(a, "gpu-0")


async def test_after_reboot_claims_are_revalidated_and_specs_recreated(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1")
    await node.prepare(a)
    content = node.spec_path(a).read_bytes()
    shutil.rmtree(node.settings.cdi_dir)  # /var/run/cdi is a tmpfs: a reboot empties it

    report = await node.restart(boot_id="boot-2").recover()

    assert report.count("revalidated-after-reboot") == 1
    assert node.spec_path(a).read_bytes() == content
    record = node.record(a)
    assert record is not None
    assert record.boot_id == "boot-2"
    node.assert_prepared(a, "gpu-1")
    again = await node.restart().recover()
    assert again.actions == []  # revalidated once, not on every start


async def test_after_reboot_claims_whose_devices_did_not_survive_are_rolled_back(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path)
    a = node.add_claim("a", "gpu-1", "gpu-2")
    await node.prepare(a)

    report = await node.restart(boot_id="boot-2", survives_reboot=False).recover()

    assert report.count("rolled-back-after-reboot") == 1
    node.assert_gone(a)
    assert (await node.prepare(a))[a.uid].error == ""  # the kubelet prepares it afresh


async def _messy_node(root: Path) -> tuple[EngineNode, dict[str, str]]:
    """A node with one claim of every crash state, plus debris."""
    node = EngineNode.create(root)
    refs = {n: node.add_claim(n, f"gpu-{i}") for i, n in enumerate(["kept", "half", "leaving"])}
    await node.prepare(refs["kept"], refs["leaving"])
    node.spec_path(refs["kept"]).unlink()
    with crash_at("claim.prepare.after-spec"), pytest.raises(SimulatedCrash):
        await node.prepare(refs["half"])
    node.restart()
    with crash_at("claim.unprepare.after-started"), pytest.raises(SimulatedCrash):
        await node.unprepare(refs["leaving"])
    node.backend.mark_in_use("gpu-3", "99999999-0000-0000-0000-000000000000")
    return node, {n: r.uid for n, r in refs.items()}


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("cdi.remove.after-unlink", 1),
        ("backend.release.after", 1),
        ("backend.release.after", 2),
        ("store.commit.after", 2),
        ("api.remove-finalizer.after", 1),
        ("cdi.write.after-rename", 1),
    ],
)
async def test_recovery_is_idempotent_when_it_crashes_itself(
    tmp_path: Path, point: str, nth: int
) -> None:
    node, uids = await _messy_node(tmp_path)
    with crash_at(point, nth=nth), pytest.raises(SimulatedCrash):
        await node.restart().recover()

    await node.restart().recover()

    node.assert_prepared(node.refs["kept"], "gpu-0")
    node.assert_gone(node.refs["half"])
    node.assert_gone(node.refs["leaving"])
    assert node.backend.in_use() == {"gpu-0": uids["kept"]}
    assert await node.findings() == []
    assert (await node.restart().recover()).actions == []  # nothing left to do
    assert FINALIZER in node.finalizers(node.refs["kept"])
