"""``dralet conformance`` passes against dralet's own example driver, run as a real
process that registers while conformance watches the registry directory: every case at
both levels, on 1.32, 1.34, 1.36, 1.37 and 1.38 kubelets, restart cases included (through
``dralet.testing.check_backend``), and through the ``dralet conformance`` command."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from dralet import conformance, testing
from dralet.cluster import DriverPaths, driver_args
from dralet.drivers.example import DRIVER_NAME

pytestmark = pytest.mark.e2e

CLI_TIMEOUT = 180.0


@pytest.mark.parametrize(
    ("kubernetes", "kubelets", "services"),
    [
        ("1.32", ("1.32",), (("1.32", "v1beta1.DRAPlugin"),)),
        ("1.37", ("1.34", "1.37"), (("1.34", "v1.DRAPlugin"), ("1.37", "v1.DRAPlugin"))),
        # 1.38 serves no resource.k8s.io/v1beta1; 1.36 watches health whatever is advertised
        ("1.38", ("1.36", "1.38"), (("1.36", "v1.DRAPlugin"), ("1.38", "v1.DRAPlugin"))),
    ],
)
async def test_every_case_passes_strictly_with_restarts(
    short_tmp: Path,
    kubernetes: str,
    kubelets: tuple[str, ...],
    services: tuple[tuple[str, str], ...],
) -> None:
    result = await testing.check_backend_async(
        "example",
        driver_name=DRIVER_NAME,
        kubelet_versions=kubelets,
        kubernetes_version=kubernetes,
        process=True,
        root=short_tmp,
    )
    assert {c.status for c in result.cases} == {"pass"}, result.to_json()
    assert result.services == services
    for newer in {"1.37", "1.38"} & set(kubelets):
        service = next(c for c in result.cases if c.label == f"kubelet.service@{newer}")
        assert service.message == "picks v1.DRAPlugin and v1.DRAResourceHealth"
        watch = next(c for c in result.cases if c.label == f"kubelet.health-watch@{newer}")
        assert watch.message == "v1.DRAResourceHealth reports"


async def test_command_serves_the_api_and_restarts_the_driver(tmp_path: Path) -> None:
    paths = DriverPaths(tmp_path)
    kubeconfig = tmp_path / "made-by-conformance" / "kubeconfig.yaml"
    junit = tmp_path / "junit.xml"
    pid_file, log = tmp_path / "driver.pid", tmp_path / "driver.log"
    argv = [sys.executable, "-m", "dralet.cli.main"]
    argv += driver_args(paths, api_url=None, extra=["--kubeconfig", str(kubeconfig)])
    script = tmp_path / "restart.sh"
    script.write_text(
        f"""#!/bin/sh
# kill -9 the driver (if running), wait until it is gone, start it again in the background
if [ -f {pid_file} ]; then
  pid=$(cat {pid_file}); kill -9 "$pid" 2>/dev/null
  n=0; while kill -0 "$pid" 2>/dev/null && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done
fi
{shlex.join(argv)} >>{log} 2>&1 </dev/null &
echo $! >{pid_file}
"""
    )
    script.chmod(0o755)
    process = await asyncio.create_subprocess_exec(
        *argv[:3], "conformance",
        "--registry-dir", str(paths.registry_dir),
        "--serve-api", "127.0.0.1:0",
        "--write-kubeconfig", str(kubeconfig),
        "--cdi-dir", str(paths.cdi_dir),
        "--driver-name", paths.driver_name,
        "--node-name", paths.node_name,
        "--kubelet-version", "1.34,1.37",
        "--restart-cmd", str(script),
        "--strict",
        "--junit", str(junit),
        "-o", "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        while not kubeconfig.exists():
            assert process.returncode is None
            await asyncio.sleep(0.02)
        starter = await asyncio.create_subprocess_exec(str(script))
        await starter.wait()
        out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    driver_log = log.read_text(errors="replace") if log.exists() else ""
    assert process.returncode == 0, (out.decode(), err.decode(), driver_log)
    document = json.loads(out)
    assert document["passed"] is True and document["strict"] is True
    assert {c["status"] for c in document["cases"]} == {"pass"}
    assert document["services"] == {"1.34": "v1.DRAPlugin", "1.37": "v1.DRAPlugin"}
    assert document["endpoint"] == str(paths.dra_socket)
    progress = err.decode()
    assert "API stand-in at http://127.0.0.1:" in progress
    assert "waiting up to 30s for a driver to register at" in progress
    assert f"waiting up to 30s for driver {paths.driver_name} to publish its devices" in progress
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    per_kubelet = sum(1 for c in conformance.CASES if c.scope == "kubelet")
    registration = len(conformance.CASES) - per_kubelet
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        str(registration + 2 * per_kubelet),
        "0",
        "0",
    )
    restarted = suite.find("testcase[@name='restart.state-kept']")
    assert (
        restarted is not None
        and restarted.get("classname") == "dralet.conformance.MUST.kubelet-1.34"
    )
