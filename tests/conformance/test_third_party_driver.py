"""A driver package installed like a vendor's (``examples/dralet-example-vendor``, entry
point ``acme-fpga`` of ``dralet.drivers``) runs with ``dralet run --driver acme-fpga
--driver-config FILE`` as a real process and passes ``dralet conformance``, restarts
included."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from dralet import conformance, kube
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess

pytestmark = pytest.mark.e2e

DRIVER = "acme-fpga"
DRIVER_NAME = "fpga.acme.example.com"


def test_the_package_is_installed_as_a_vendor_would() -> None:
    (point,) = metadata.entry_points(group="dralet.drivers", name=DRIVER)
    assert point.value == "acme_fpga.driver:factory"
    assert point.dist is not None and point.dist.name == "dralet-example-vendor"


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A node root short enough for unix socket paths."""
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


async def test_acme_fpga_passes_conformance_as_a_process(tmp_path: Path, short_root: Path) -> None:
    paths = DriverPaths(short_root, driver_name=DRIVER_NAME)
    config = tmp_path / "acme-fpga.yaml"
    config.write_text("devices: 3\nbitstream: crc32.bit\n")
    async with ApiServer(kubernetes_version="1.37") as api:
        ControlPlane(api, driver_name=DRIVER_NAME).add_node()
        args = [
            "run",
            "--driver", DRIVER,
            "--driver-config", str(config),
            "--driver-name", DRIVER_NAME,
            "--node-name", paths.node_name,
            "--plugin-dir", str(paths.plugin_dir),
            "--registry-dir", str(paths.registry_dir),
            "--cdi-dir", str(paths.cdi_dir),
            "--api-url", api.url,
        ]  # fmt: skip
        driver = DriverProcess(args, log_path=tmp_path / "driver.log", mode="exec")

        async def restart() -> None:
            await driver.kill()
            driver.start()

        settings = conformance.ConformanceSettings(
            registry_dir=paths.registry_dir,
            driver_name=DRIVER_NAME,
            cdi_dir=paths.cdi_dir,
            node_name=paths.node_name,
            kubelet_versions=("1.34", "1.37"),
            restart=restart,
            strict=True,
        )
        try:
            async with await kube.connect(url=api.url) as client:
                claims = conformance.ApiClaimFactory(client, node_name=paths.node_name)
                async with asyncio.TaskGroup() as group:
                    suite = group.create_task(conformance.run_suite(settings, claims=claims))
                    driver.start()  # after conformance began watching the registry dir
                result = suite.result()
            published = api.list("ResourceSlice")
        finally:
            await driver.terminate()
    assert result.failed() == [], (result.to_json(), driver.log())
    assert {c.status for c in result.cases} == {"pass"}, result.to_json()
    assert "driver acme-fpga (acme_fpga.driver:factory)" in driver.log()
    devices = sorted(d["name"] for s in published for d in s["spec"].get("devices", ()))
    assert devices == ["fpga-0", "fpga-1", "fpga-2"], "the --driver-config file was read"
    assert not list(paths.cdi_dir.glob("*.json"))
