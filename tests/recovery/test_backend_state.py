"""The backend's state is never lost: ``release`` gets exactly what ``prepare`` returned
(and the device's config), after a partial failure, a crash at any failpoint, a reboot,
a full disk, or in fail-closed mode. Judged by the strict fake backend of the test kit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dralet import failpoints
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    ClaimUID,
    DeviceConfig,
    PreparedDevice,
)
from dralet.testing.strict import StrictBackend
from tests.claimstore import damage_store
from tests.recovery.nodekit import EngineNode, SimulatedCrash, crash_at

PREPARE_POINTS = [
    "claim.prepare.after-started",
    "api.add-finalizer.after",
    "claim.prepare.after-finalizer",
    "backend.prepare.before",
    "backend.prepare.after",
    "claim.prepare.after-backend",
    "cdi.write.after-rename",
    "claim.prepare.after-spec",
]
UNPREPARE_POINTS = [
    "claim.unprepare.after-started",
    "cdi.remove.after-unlink",
    "backend.release.before",
    "backend.release.after",
    "claim.unprepare.after-release",
    "api.remove-finalizer.after",
]


@pytest.fixture(autouse=True)
def _disarm() -> object:
    yield
    failpoints.disarm()


def _fail_second_device(node: EngineNode, error: BaseException) -> None:
    """The example backend prepares a claim device by device: fail on gpu-1."""
    original = node.backend.prepare

    async def prepare(claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        if device.device == "gpu-1":
            raise error
        return await original(claim, device)

    node.backend.prepare = prepare  # type: ignore[method-assign]


async def test_one_device_failing_rolls_back_the_other_with_its_state(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-0", "gpu-1")
    _fail_second_device(node, RuntimeError("gpu-1 is on fire"))
    outcome = (await node.prepare(a))[a.uid]
    assert "gpu-1 is on fire" in outcome.error
    node.assert_gone(a)
    assert node.strict is not None
    node.strict.assert_clean()


async def test_crash_between_devices_then_restart_releases_with_the_state(
    tmp_path: Path,
) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-0", "gpu-1")
    _fail_second_device(node, SimulatedCrash())
    with pytest.raises(SimulatedCrash):
        await node.prepare(a)
    assert node.held_by(a) == ["gpu-0"]
    await node.restart().recover()
    node.assert_gone(a)
    assert node.strict is not None
    node.strict.assert_clean()


@pytest.mark.parametrize(
    ("point", "nth"),
    [(p, 1) for p in PREPARE_POINTS],
)
async def test_crash_in_prepare_then_restart_releases_with_the_state(
    tmp_path: Path, point: str, nth: int
) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-0", "gpu-1")
    with crash_at(point, nth=nth), pytest.raises(SimulatedCrash):
        await node.prepare(a)
    await node.restart().recover()
    node.assert_gone(a)
    assert (await node.prepare(a))[a.uid].error == ""
    assert await node.unprepare(a) == {a.uid: ""}
    node.assert_gone(a)
    assert node.strict is not None
    node.strict.assert_clean()


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
async def test_crash_in_unprepare_then_restart_releases_with_the_state(
    tmp_path: Path, point: str
) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-2", "gpu-3")
    assert (await node.prepare(a))[a.uid].error == ""
    with crash_at(point), pytest.raises(SimulatedCrash):
        await node.unprepare(a)
    await node.restart().recover()
    node.assert_gone(a)
    assert node.strict is not None
    node.strict.assert_clean()


async def test_reboot_that_loses_the_device_releases_with_the_state(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-0")
    assert (await node.prepare(a))[a.uid].error == ""
    report = await node.restart(survives_reboot=False, boot_id="boot-2").recover()
    assert report.count("rolled-back-after-reboot") == 1
    node.assert_gone(a)
    assert node.strict is not None
    node.strict.assert_clean()


async def test_fail_closed_unprepare_releases_with_the_state(tmp_path: Path) -> None:
    node = EngineNode.create(tmp_path, strict=True)
    a = node.add_claim("a", "gpu-1")
    assert (await node.prepare(a))[a.uid].error == ""
    damage_store(node.settings.store_path)
    engine = node.restart()
    report = await engine.recover()
    assert report.fail_closed
    assert await node.unprepare(a) == {a.uid: ""}
    assert node.held_by(a) == []
    assert node.strict is not None
    node.strict.assert_clean()


def _allocation(*configs: DeviceConfig) -> ClaimAllocation:
    claim = ClaimRef(ClaimUID("u1"), "default", "c")
    device = AllocatedDevice(request="r", pool="p", device="dev-0", configs=configs)
    return ClaimAllocation(claim, (device,), configs)


CLASS_CONFIG = DeviceConfig("class", (), {"a": 1})
CLAIM_CONFIG = DeviceConfig("claim", ("r",), {"a": 2})


async def test_strict_backend_catches_a_release_with_the_wrong_state(tmp_path: Path) -> None:
    backend = StrictBackend(state_dir=tmp_path)
    allocation = _allocation(CLASS_CONFIG)
    prepared = await backend.prepare_claim(allocation)
    again = await backend.prepare_claim(allocation)
    assert [p.state for p in again] == [p.state for p in prepared]  # idempotent
    await backend.release_claim(allocation, [{}])
    with pytest.raises(AssertionError, match="got state"):
        backend.assert_clean()
    assert StrictBackend.violations_in(tmp_path) == backend.violations


async def test_strict_backend_catches_a_release_with_other_configs(tmp_path: Path) -> None:
    backend = StrictBackend(state_dir=tmp_path)
    prepared = await backend.prepare_claim(_allocation(CLASS_CONFIG, CLAIM_CONFIG))
    # The same parameters, but the class config's source is lost.
    flattened = _allocation(DeviceConfig("claim", (), {"a": 1}), CLAIM_CONFIG)
    await backend.release_claim(flattened, [p.state for p in prepared])
    with pytest.raises(AssertionError, match="got config"):
        backend.assert_clean()


async def test_strict_backend_accepts_the_state_and_config_prepare_got(tmp_path: Path) -> None:
    backend = StrictBackend(state_dir=tmp_path)
    allocation = _allocation(CLASS_CONFIG, CLAIM_CONFIG)
    prepared = await backend.prepare_claim(allocation)
    assert await backend.devices_in_use() == {"dev-0": {"u1"}}
    await backend.release_claim(allocation, [p.state for p in prepared])
    backend.assert_clean()
    assert await backend.devices_in_use() == {}
