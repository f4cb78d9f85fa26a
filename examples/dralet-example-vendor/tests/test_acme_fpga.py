"""Acme FPGAs through dralet's façade: the factory reads its config, and the driver passes
every ``dralet conformance`` case, restarts included (``dralet.testing.check_backend``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from acme_fpga import DRIVER_NAME, AcmeFPGAs, factory

import dralet
from dralet import testing

NODE = "node-a"


@pytest.fixture
def root() -> Iterator[Path]:
    """A node root short enough for unix socket paths."""
    with tempfile.TemporaryDirectory(prefix="acme-") as path:
        yield Path(path)


def settings_on(root: Path, api: dralet.ApiSettings) -> dralet.Settings:
    return dralet.Settings(
        dralet.DriverSettings(
            driver_name=DRIVER_NAME,
            node_name=NODE,
            plugin_dir=root / "plugins" / DRIVER_NAME,
            registry_dir=root / "plugins_registry",
            cdi_dir=root / "cdi",
        ),
        api=api,
    )


def test_factory_reads_the_driver_config(root: Path) -> None:
    settings = settings_on(root, dralet.ApiSettings(standalone=True))
    config = dralet.DriverConfig(text="devices: 3\nbitstream: crc32.bit\n")
    backend = factory(settings, config)
    assert (backend.count, backend.bitstream) == (3, "crc32.bit")
    override = dralet.DriverConfig(text="devices: 3\n", options={"devices": "1"})
    assert factory(settings, override).count == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [("devices: 0\n", "devices: expected at least 1"), ("colour: red\n", "unknown setting")],
)
def test_factory_refuses_a_bad_config(root: Path, text: str, message: str) -> None:
    settings = settings_on(root, dralet.ApiSettings(standalone=True))
    with pytest.raises(ValueError, match=message):
        factory(settings, dralet.DriverConfig(text=text))


def test_passes_conformance_restarts_included() -> None:
    result = testing.check_backend(
        factory, driver_name=DRIVER_NAME, config=dralet.DriverConfig(text="devices: 2\n")
    )
    assert {case.status for case in result.cases} == {"pass"}
    assert any(case.name.startswith("restart.") for case in result.cases)


def _allocation(*configs: dralet.DeviceConfig, devices: int = 1) -> dralet.ClaimAllocation:
    claim = dralet.ClaimRef(dralet.ClaimUID("uid-1"), "default", "c")
    return dralet.ClaimAllocation(
        claim,
        tuple(
            dralet.AllocatedDevice(request="fpga", pool=NODE, device=f"fpga-{i}", configs=configs)
            for i in range(devices)
        ),
        configs,
    )


def test_configs_apply_in_precedence_order_and_clock_only_from_the_class(root: Path) -> None:
    fpgas = AcmeFPGAs(state_dir=root, count=2)
    from_class = dralet.DeviceConfig("class", (), {"bitstream": "class.bit", "clockMHz": 300})
    from_claim = dralet.DeviceConfig("claim", ("fpga",), {"bitstream": "claim.bit"})
    prepared = fpgas.prepare_claim(_allocation(from_class, from_claim, devices=2))
    assert [p.state for p in prepared] == [{"bitstream": "claim.bit", "clockMHz": 300}] * 2
    assert "ACME_FPGA_1_CLOCK_MHZ=300" in prepared[1].edits.env
    assert fpgas.devices_in_use() == {"fpga-0": "uid-1", "fpga-1": "uid-1"}
    fpgas.release_claim(_allocation(from_class, from_claim, devices=2), [{}, {}])
    assert fpgas.devices_in_use() == {}


def test_a_claim_cannot_set_the_clock_and_nothing_is_programmed(root: Path) -> None:
    fpgas = AcmeFPGAs(state_dir=root, count=2)
    overclock = dralet.DeviceConfig("claim", (), {"clockMHz": 900})
    with pytest.raises(dralet.ClaimError, match="only be set by a DeviceClass"):
        fpgas.prepare_claim(_allocation(overclock, devices=2))
    assert fpgas.devices_in_use() == {}
