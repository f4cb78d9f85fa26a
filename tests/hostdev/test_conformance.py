"""``dralet run --driver hostdev --config FILE`` as a process passes strict ``dralet
conformance`` on 1.34 and 1.37 kubelets, kill -9 restarts included, over device nodes
made for the test."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dralet import conformance, kube
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from tests.hostdev.fakehost import FakeHost

pytestmark = pytest.mark.e2e

DRIVER = "hostdev.example.com"


async def test_hostdev_passes_strict_conformance_as_a_process(
    host: FakeHost, tmp_path: Path, short_root: Path
) -> None:
    for index, number in enumerate(((1, 3), (1, 5), (1, 7))):
        host.node(f"acc{index}", number)
    config = tmp_path / "hostdev.yaml"
    config.write_text(
        host.config(
            f"  - name: acc\n    match: {{paths: ['{host.dev}/acc*'], type: char}}\n"
            "    naming: [path]\n    containerPath: /dev/accel\n"
        )
    )
    paths = DriverPaths(short_root, driver_name=DRIVER)
    async with ApiServer(kubernetes_version="1.37") as api:
        ControlPlane(api, driver_name=DRIVER).add_node()
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, driver="hostdev", driver_config=config),
            log_path=tmp_path / "driver.log",
            mode="exec",
        )

        async def restart() -> None:
            await driver.kill()
            driver.start()

        settings = conformance.ConformanceSettings(
            registry_dir=paths.registry_dir,
            driver_name=DRIVER,
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
                    driver.start()
                result = suite.result()
            published = api.list("ResourceSlice")
        finally:
            await driver.terminate()
    assert result.failed() == [], (result.to_json(), driver.log())
    assert {c.status for c in result.cases} == {"pass"}, result.to_json()
    devices = sorted(d["name"] for s in published for d in s["spec"].get("devices", ()))
    assert devices == ["acc-acc0", "acc-acc1", "acc-acc2"]
    assert not list(paths.cdi_dir.glob("*.json"))
