"""Attribute and capacity names a 1.38 cluster, or the Go helper at publish, would refuse
are refused by the driver before anything is published, naming the device and the name."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import dralet
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane
from dralet.drivers.example import SimulatedGPUs
from dralet.kube import slices
from dralet.node import published
from dralet.testing.claims import DRIVER, NODE
from tests.node.conftest import make_settings


@pytest.fixture
def short_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


@pytest.mark.parametrize("field", ["attributes", "capacity"])
def test_a_name_with_two_slashes_is_refused_at_construction(field: str) -> None:
    value: object = "1" if field == "capacity" else "hopper"
    with pytest.raises(ValueError, match="must not contain more than one slash") as caught:
        dralet.Device(name="gpu-0", **{field: {"gpu.example.com/arch/family": value}})
    assert "device 'gpu-0'" in str(caught.value)
    assert "'gpu.example.com/arch/family'" in str(caught.value)


class OwnDomainGPUs(SimulatedGPUs):
    """Example GPUs whose second device qualifies an attribute with the driver's name."""

    async def devices(self) -> list[dralet.Device]:
        listed = list(await super().devices())
        second = listed[1]
        listed[1] = dralet.Device(
            name=second.name,
            attributes={**second.attributes, f"{DRIVER}/model": "A100"},
            capacity={f"{DRIVER}/memory": "80Gi"},
        )
        return listed


async def test_own_domain_names_stop_the_driver_before_it_publishes(short_root: Path) -> None:
    async with ApiServer(kubernetes_version="1.38") as api:
        ControlPlane(api).add_node()
        settings = dralet.Settings(make_settings(short_root), api=dralet.ApiSettings(url=api.url))
        backend = OwnDomainGPUs(state_dir=short_root / "gpus", node_name=NODE, count=2)
        driver = dralet.Driver(backend, settings)
        with pytest.raises(slices.InvalidDeviceError) as caught:
            await driver.start()
        assert caught.value.problems == (
            f"device 'gpu-1': attribute '{DRIVER}/model': use the unqualified 'model': "
            f"the driver name '{DRIVER}' is implied",
            f"device 'gpu-1': capacity '{DRIVER}/memory': use the unqualified 'memory': "
            f"the driver name '{DRIVER}' is implied",
        )
        assert api.list("ResourceSlice") == []
        assert not settings.driver.registration_socket.exists()
        assert not settings.driver.dra_socket.exists()


def test_a_device_renamed_into_the_own_domain_later_is_left_out() -> None:
    good = dralet.Device(name="gpu-0", attributes={"model": "A100"})
    bad = dralet.Device(name="gpu-1", attributes={f"{DRIVER}/model": "A100"})
    built = published.build_pool([good, bad], driver=DRIVER, pool=NODE, node_name=NODE)
    assert [d["name"] for d in built.chunks[0]] == ["gpu-0"]
    assert built.skipped == (
        f"device 'gpu-1': attribute '{DRIVER}/model': use the unqualified 'model': "
        f"the driver name '{DRIVER}' is implied",
    )
