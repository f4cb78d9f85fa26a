"""``dralet conformance`` passes against dralet's own example driver, run as a real
process that registers while conformance watches the registry directory."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from dralet import kube
from dralet.testing import conformance
from dralet.testing.apiserver import ApiServer
from dralet.testing.cluster import ControlPlane
from dralet.testing.process import DriverPaths, DriverProcess, driver_args

pytestmark = pytest.mark.e2e

CLI_TIMEOUT = 90.0
KUBECONFIG_WAIT = 30.0
POLL = 0.02


async def test_suite_passes_on_kubernetes_1_32(tmp_path: Path) -> None:
    paths = DriverPaths(tmp_path)
    async with ApiServer(kubernetes_version="1.32") as api:
        ControlPlane(api).add_node()
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish"]),
            log_path=tmp_path / "driver.log",
        )
        settings = conformance.ConformanceSettings(
            registry_dir=paths.registry_dir,
            driver_name=paths.driver_name,
            cdi_dir=paths.cdi_dir,
            node_name=paths.node_name,
            kubelet_version="1.32",
        )
        try:
            async with await kube.connect(url=api.url) as client:
                factory = conformance.ApiClaimFactory(
                    client, node_name=paths.node_name, pool=paths.node_name
                )
                async with asyncio.TaskGroup() as group:
                    suite = group.create_task(conformance.run_suite(settings, claims=factory))
                    driver.start()  # after conformance began watching the registry dir
                result = suite.result()
        finally:
            await driver.terminate()
        assert result.failed() == [], (result.to_json(), driver.log())
        assert all(c.status == "pass" for c in result.cases)
        assert result.service == "v1beta1.DRAPlugin"
        assert api.list("ResourceClaim") == []
        assert not list(paths.cdi_dir.glob("*.json"))


async def test_command_serves_the_api_for_the_driver(tmp_path: Path) -> None:
    paths = DriverPaths(tmp_path)
    kubeconfig = tmp_path / "kubeconfig.yaml"
    junit = tmp_path / "junit.xml"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dralet.cli.main", "conformance",
        "--registry-dir", str(paths.registry_dir),
        "--serve-api", "127.0.0.1:0",
        "--write-kubeconfig", str(kubeconfig),
        "--cdi-dir", str(paths.cdi_dir),
        "--driver-name", paths.driver_name,
        "--node-name", paths.node_name,
        "--junit", str(junit),
        "-o", "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    driver = DriverProcess(
        driver_args(paths, api_url=None, extra=["--no-publish", "--kubeconfig", str(kubeconfig)]),
        log_path=tmp_path / "driver.log",
    )
    try:
        deadline = time.monotonic() + KUBECONFIG_WAIT
        while not kubeconfig.exists():
            assert time.monotonic() < deadline and process.returncode is None
            await asyncio.sleep(POLL)
        driver.start()
        out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await driver.terminate()
    assert process.returncode == 0, (out.decode(), err.decode(), driver.log())
    document = json.loads(out)
    assert document["passed"] is True
    assert [c["name"] for c in document["cases"]] == list(conformance.CASE_NAMES)
    assert {c["status"] for c in document["cases"]} == {"pass"}
    assert document["service"] == "v1.DRAPlugin"
    assert document["endpoint"] == str(paths.dra_socket)
    assert "API stand-in at http://127.0.0.1:" in err.decode()
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        str(len(conformance.CASES)),
        "0",
        "0",
    )
