"""The façade: ``dralet.Driver`` wires API access, claims, publishing and the node server;
``dralet.run`` serves until SIGTERM; a named driver is found and built by its factory."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dralet
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane
from dralet.drivers.example import SimulatedGPUs
from dralet.kube import access
from dralet.kubelet import KubeletEmulator
from dralet.testing.claims import DRIVER, NODE, MemoryClaims, allocated_claim
from tests.node.conftest import make_settings
from tests.node.test_prepare import kclaim

WAIT_S = 20.0


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A node root short enough for unix socket paths."""
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


def broken_factory(settings: dralet.Settings, config: dralet.DriverConfig) -> dralet.ClaimBackend:
    raise RuntimeError("no cards found on the PCI bus")


def not_a_backend(settings: dralet.Settings, config: dralet.DriverConfig) -> Any:
    return object()


def settings_on(root: Path, **api: Any) -> dralet.Settings:
    return dralet.Settings(make_settings(root), api=dralet.ApiSettings(**api))


async def slice_devices(api: ApiServer, *, more_than: int) -> list[str]:
    """The device names of the node's published slices, once there are more than given."""
    async with asyncio.timeout(WAIT_S):
        while True:
            names = [
                device["name"]
                for item in api.list("ResourceSlice")
                for device in item["spec"].get("devices", ())
            ]
            if len(names) > more_than:
                return sorted(names)
            await asyncio.sleep(0.02)


async def test_driver_publishes_and_republishes_on_publish(short_root: Path) -> None:
    async with ApiServer() as api:
        ControlPlane(api).add_node()
        settings = dralet.Settings(make_settings(short_root), api=dralet.ApiSettings(url=api.url))
        config = dralet.DriverConfig(options={"gpus": "2"})
        async with dralet.Driver("example", settings, config=config) as driver:
            assert driver.publishing
            assert await slice_devices(api, more_than=1) == ["gpu-0", "gpu-1"]
            backend = driver.backend
            assert isinstance(backend, SimulatedGPUs)
            assert backend.state_dir == short_root / "plugins" / DRIVER / "backend"
            backend.count = 3
            assert driver.publish()
            assert await slice_devices(api, more_than=2) == ["gpu-0", "gpu-1", "gpu-2"]
        await asyncio.wait_for(driver.wait(), WAIT_S)
        assert not settings.driver.dra_socket.exists()
        assert not settings.driver.registration_socket.exists()


class HotPlugGPUs(SimulatedGPUs):
    """Example GPUs that say when a card is added, through the function they are given."""

    publish: Any = None

    def use_publish(self, publish: Any) -> None:
        self.publish = publish

    def plug_in(self) -> None:
        self.count += 1
        assert self.publish is not None and self.publish()


async def test_a_backend_tells_the_driver_its_devices_changed(short_root: Path) -> None:
    async with ApiServer() as api:
        ControlPlane(api).add_node()
        settings = dralet.Settings(make_settings(short_root), api=dralet.ApiSettings(url=api.url))
        backend = HotPlugGPUs(state_dir=short_root / "gpus", node_name=NODE, count=1)
        async with dralet.Driver(backend, settings):
            assert await slice_devices(api, more_than=0) == ["gpu-0"]
            backend.plug_in()  # no resync waited for: the default is 30 s
            assert await slice_devices(api, more_than=1) == ["gpu-0", "gpu-1"]


async def test_standalone_driver_serves_its_own_claim_source(short_root: Path) -> None:
    settings = settings_on(short_root, standalone=True)
    backend = SimulatedGPUs(state_dir=short_root / "gpus", node_name=NODE, count=2)
    claims = MemoryClaims()
    kubelet = KubeletEmulator(settings.driver.registry_dir)
    try:
        async with dralet.Driver(backend, settings, claims=claims) as driver:
            assert driver.publish() is False, "standalone publishes nothing"
            assert not driver.registered, "no kubelet has called GetInfo yet"
            plugin = await kubelet.wait_for_plugin(DRIVER, within=WAIT_S)
            assert driver.registered
            claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-1")]))
            result = await plugin.prepare([kclaim(claim)])
            assert result.claims[claim["metadata"]["uid"]].error == ""
            assert backend.in_use() == {"gpu-1": claim["metadata"]["uid"]}
            waiter = asyncio.ensure_future(driver.wait())
            await asyncio.gather(driver.stop(), driver.stop())  # the second one waits
            assert not settings.driver.dra_socket.exists()
            await asyncio.wait_for(waiter, WAIT_S)
    finally:
        await kubelet.close()


async def test_api_access_is_checked_before_anything_is_created(short_root: Path) -> None:
    settings = settings_on(short_root / "node", kubeconfig=short_root / "missing.yaml")
    driver = dralet.Driver("example", settings)
    with pytest.raises(access.ApiAccessError, match=r"missing\.yaml: no such file"):
        await driver.start()
    assert not (short_root / "node" / "plugins").exists()


def test_an_unknown_driver_lists_the_installed_ones(tmp_path: Path) -> None:
    with pytest.raises(dralet.DriverLoadError) as caught:
        dralet.Driver("no-such-driver", settings_on(tmp_path, standalone=True))
    message = str(caught.value)
    assert message.startswith("unknown driver 'no-such-driver' (available: ")
    listed = message.partition("(available: ")[2].rstrip(")").split(", ")
    assert {"acme-fpga", "example", "example-strict", "hostdev"} <= set(listed)
    assert listed == sorted(listed)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("tests.node.test_facade:nothing_here", "tests.node.test_facade has no nothing_here"),
        ("no_such_package.driver:factory", "cannot import no_such_package.driver"),
        ("tests.node.test_facade", None),
        ("tests.node.test_facade:", "expected package.module:callable"),
    ],
)
def test_a_module_factory_that_cannot_load_is_one_error(
    tmp_path: Path, name: str, message: str | None
) -> None:
    with pytest.raises(dralet.DriverLoadError) as caught:
        dralet.Driver(name, settings_on(tmp_path, standalone=True))
    assert message is None or message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("broken_factory", "could not start: RuntimeError: no cards found on the PCI bus"),
        ("not_a_backend", "returned object, not a ClaimBackend (missing: devices, prepare_claim"),
    ],
)
async def test_a_failing_factory_names_the_driver_and_leaves_nothing_running(
    short_root: Path, factory: str, message: str
) -> None:
    name = f"tests.node.test_facade:{factory}"
    settings = settings_on(short_root, standalone=True)
    driver = dralet.Driver(name, settings)
    with pytest.raises(dralet.DriverStartError) as caught:
        await driver.start()
    assert str(caught.value).startswith(f"driver {name!r} ")
    assert message in str(caught.value)
    await asyncio.wait_for(driver.wait(), WAIT_S)
    assert not settings.driver.dra_socket.exists()
    assert not settings.driver.registration_socket.exists()


def test_run_serves_until_sigterm_and_stops_in_stages(short_root: Path) -> None:
    settings = make_settings(short_root)
    program = textwrap.dedent(
        f"""
        from pathlib import Path
        import dralet
        from dralet.drivers.example import SimulatedGPUs

        settings = dralet.Settings(
            dralet.DriverSettings(
                driver_name={DRIVER!r},
                node_name={NODE!r},
                plugin_dir=Path({str(settings.plugin_dir)!r}),
                registry_dir=Path({str(settings.registry_dir)!r}),
                cdi_dir=Path({str(settings.cdi_dir)!r}),
                boot_id_path=Path({str(settings.boot_id_path)!r}),
            ),
            api=dralet.ApiSettings(standalone=True),
        )
        backend = SimulatedGPUs(state_dir=settings.state_dir, node_name={NODE!r}, count=1)
        dralet.run(backend, settings)
        print("run returned")
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        for _ in wait_until(lambda: settings.registration_socket.exists()):
            assert process.poll() is None, process.communicate()[0]
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out
    assert "run returned" in out
    assert "driver stopped" in out
    assert not settings.dra_socket.exists()
    assert not settings.registration_socket.exists()


def wait_until(ready: Any, within: float = WAIT_S) -> Iterator[None]:
    """Yield (so the caller can check on the process) until ``ready()`` or ``within`` s."""
    deadline = time.monotonic() + within
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        yield
        time.sleep(0.02)
