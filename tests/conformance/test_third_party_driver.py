"""A driver package installed like a vendor's (``examples/dralet-example-vendor``, entry
point ``acme-fpga`` of ``dralet.drivers``) runs with ``dralet run --driver acme-fpga
--driver-config FILE`` as a real process and passes ``dralet conformance``, kill -9
restarts included (``dralet.testing.check_backend`` with ``process=True``)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

import dralet
from dralet import testing

pytestmark = pytest.mark.e2e

DRIVER = "acme-fpga"
DRIVER_NAME = "fpga.acme.example.com"


def test_the_package_is_installed_as_a_vendor_would() -> None:
    (point,) = metadata.entry_points(group="dralet.drivers", name=DRIVER)
    assert point.value == "acme_fpga.driver:factory"
    assert point.dist is not None and point.dist.name == "dralet-example-vendor"


async def test_acme_fpga_passes_conformance_as_a_process(short_tmp: Path) -> None:
    config = short_tmp / "acme-fpga.yaml"
    config.write_text("devices: 3\nbitstream: crc32.bit\n")
    result = await testing.check_backend_async(
        DRIVER,
        driver_name=DRIVER_NAME,
        config=dralet.DriverConfig.read(config),
        process=True,
        root=short_tmp / "node",
    )
    assert {c.status for c in result.cases} == {"pass"}, result.to_json()
    assert any(c.name.startswith("restart.") for c in result.cases)
    assert result.published == ("fpga-0", "fpga-1", "fpga-2"), "the --driver-config file was read"
    log = (short_tmp / "node" / "driver.log").read_text()
    assert "driver acme-fpga (acme_fpga.driver:factory)" in log
