"""``dralet.testing.check_backend``: conformance against an author's backend in one call,
its verdict as the suite's result, or every failed case named in one failure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import dralet
from dralet import testing
from dralet.testing import MemoryDevices

DRIVER = "gpu.example.com"


class NeverPrepares(MemoryDevices):
    """Lists its devices, and refuses every claim."""

    async def prepare_claim(
        self, allocation: dralet.ClaimAllocation
    ) -> Sequence[dralet.PreparedDevice]:
        raise dralet.PermanentError("the cards are on fire")


def memory_gpus(settings: dralet.Settings, config: dralet.DriverConfig) -> MemoryDevices:
    return MemoryDevices(int(config.options.get("gpus", "2")))


async def test_a_backend_object_passes_and_the_report_comes_back(short_tmp: Path) -> None:
    result = await testing.check_backend_async(
        MemoryDevices(2), driver_name=DRIVER, kubelet_versions=("1.37",), root=short_tmp
    )
    assert result.passed and result.strict
    assert {case.status for case in result.cases} == {"pass"}
    assert result.services == (("1.37", "v1.DRAPlugin"),)
    assert any(case.name.startswith("restart.") for case in result.cases)


async def test_a_factory_is_built_again_at_every_restart(short_tmp: Path) -> None:
    built: list[Mapping[str, Any]] = []

    def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> MemoryDevices:
        built.append(dict(config.options))
        assert settings.state_dir.is_dir()
        return memory_gpus(settings, config)

    config = dralet.DriverConfig(options={"gpus": "3"})
    await testing.check_backend_async(
        factory, driver_name=DRIVER, config=config, kubelet_versions=("1.34",), root=short_tmp
    )
    assert len(built) > 1 and all(options == {"gpus": "3"} for options in built)


async def test_every_failed_case_is_named_in_one_failure(short_tmp: Path) -> None:
    with pytest.raises(testing.ConformanceFailure) as caught:
        await testing.check_backend_async(
            NeverPrepares(2), driver_name=DRIVER, kubelet_versions=("1.37",), restarts=False
        )
    failed = caught.value.result.failed()
    assert {"prepare.twice", "prepare.devices-match-allocation", "cdi.resolvable"} <= set(failed)
    message = str(caught.value)
    assert message.startswith(f"{DRIVER} failed conformance:")
    assert all(f"\n  {name}@1.37 [" in message for name in failed), message
    assert "prepare failed: PermanentError: the cards are on fire" in message


def test_process_mode_needs_a_named_driver() -> None:
    with pytest.raises(TypeError, match="name the driver"):
        testing.check_backend(MemoryDevices(1), driver_name=DRIVER, process=True)


def test_something_that_is_no_backend_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"object is not a ClaimBackend \(missing: devices, "):
        testing.check_backend(object(), driver_name=DRIVER)  # type: ignore[arg-type]
