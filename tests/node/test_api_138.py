"""A 1.38 API server serves no resource.k8s.io/v1beta1: the driver finds the versions it
speaks by discovery, publishes, reads claims and keeps their finalizers there."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import dralet
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane
from dralet.kubelet import KubeletEmulator
from dralet.testing.claims import DRIVER
from tests import owed
from tests.node.conftest import make_settings

WAIT_S = 20.0
FINALIZER = f"{DRIVER}/prepared"


@pytest.fixture
def short_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


async def wait_for_slices(plane: ControlPlane) -> None:
    async with asyncio.timeout(WAIT_S):
        while not plane.slices():  # noqa: ASYNC110 - the stand-in has no event to wait on
            await asyncio.sleep(0.02)


async def test_driver_runs_against_a_server_without_v1beta1(short_root: Path) -> None:
    async with ApiServer(kubernetes_version="1.38") as api:
        assert api.versions == ("v1", "v1beta2")
        plane = ControlPlane(api)
        plane.add_node()
        plane.add_device_class()
        settings = dralet.Settings(make_settings(short_root), api=dralet.ApiSettings(url=api.url))
        config = dralet.DriverConfig(options={"gpus": "2"})
        kubelet = KubeletEmulator(settings.driver.registry_dir, kubelet_version="1.38")
        async with dralet.Driver("example", settings, config=config):
            plugin = await kubelet.wait_for_plugin(DRIVER, within=WAIT_S)
            await wait_for_slices(plane)
            [published] = plane.slices()
            assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0", "gpu-1"]
            claim = plane.allocate_claim("c1", [("gpu", "gpu-1")])
            prepared = await plugin.prepare([claim])
            assert prepared.kubelet_error == ""
            assert prepared.claims[claim.uid].devices[0].device_name == "gpu-1"
            assert plane.finalizers(claim) == [FINALIZER]
            unprepared = await plugin.unprepare([claim])
            assert unprepared.kubelet_error == ""
            assert await owed.settled_finalizers(plane, claim) == []
            await kubelet.close()
        written = {(w.kind, w.api_version) for w in api.writes}
        assert ("ResourceSlice", "resource.k8s.io/v1") in written
        assert not any(version.endswith("v1beta1") for _, version in written)
