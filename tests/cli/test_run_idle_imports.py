"""``dralet run --driver example``, registered and idle, has not imported what only other
commands, other drivers or the rare kinds of API access need: each of those modules costs
resident memory in every node's driver for nothing."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from dralet.apiserver import ApiServer
from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator

pytestmark = pytest.mark.e2e

DRIVER = "gpu.example.com"
HEAVY = {
    "kubernetes": "the official client: every API class and model (23 MiB); only "
    "kubeconfig users with exec or auth-provider credentials need its loader",
    "pydantic": "the hostdev driver's config schema",
    "kubernetes_validate": "manifest schemas (dralet validate)",
    "jsonschema": "manifest schemas (dralet validate)",
    "cel_expr_python": "CEL (dralet validate, dralet simulate)",
    "ruamel": "round-trip YAML (dralet validate)",
    "dralet.validation": "dralet validate",
    "dralet.allocation.allocator": "dralet simulate",
    "dralet.apiserver": "the API stand-in (tests, demo)",
    "dralet.kubelet": "the kubelet emulator (tests, conformance)",
    "dralet.conformance": "dralet conformance",
    "dralet.testing": "driver authors' test helpers",
    "dralet.drivers.hostdev": "another driver",
    "requests": "a synchronous HTTP client",
    "websocket": "exec/attach streams",
    "aiohttp.web": "the server side of aiohttp (only with --metrics-port)",
    "urllib3": "the official client's synchronous transport (5 MiB)",
    "yaml_rs": "the compiled YAML reader (5 MiB): manifests (dralet validate, dralet simulate)",
    "dralet.yamltext": "manifest YAML (dralet validate, dralet simulate)",
    "dralet.cli.demo": "another command",
    "dralet.cli.validate": "another command",
    "dralet.cli.audit": "another command",
    "dralet.cli.simulate": "another command",
    "dralet.cli.conformance": "another command",
    "dralet.cluster": "simulated clusters (tests, benchmarks)",
    "multiprocessing": "the fork server of simulated clusters' driver processes",
    "dralet.drivers.nvidia": "another driver",
    "pynvml": "NVIDIA's management library (the nvidia driver)",
    "dralet.inotify": "device-node watches (the hostdev driver)",
    "ctypes": "foreign functions (inotify, NVML): other drivers",
}
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)
SLICE_WITHIN = 60.0


async def test_idle_driver_imports_nothing_heavy(short_tmp: Path) -> None:
    async with ApiServer(kubernetes_version="1.34") as api:
        kubeconfig = api.write_kubeconfig(short_tmp / "kubeconfig")
        paths = DriverPaths(short_tmp)
        driver = DriverProcess(
            driver_args(paths, api_url=None, extra=["--kubeconfig", str(kubeconfig)]),
            log_path=short_tmp / "driver.log",
            env={"PYTHONPROFILEIMPORTTIME": "1"},
            mode="exec",
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version="1.34")
        driver.start()
        try:
            await kubelet.wait_for_plugin(DRIVER)
            # Idle means after the first API work too: the node's slice is published.
            deadline = time.monotonic() + SLICE_WITHIN
            while not api.list("ResourceSlice"):
                assert time.monotonic() < deadline and driver.alive, driver.log()
                await asyncio.sleep(0.05)
        finally:
            await kubelet.close()
            await driver.terminate()
    imported = set(IMPORT_LINE.findall(driver.log()))
    # The import log is there: the modules the driver cannot run without are in it.
    assert {"grpc", "aiohttp", "dralet.kube.client", "dralet.drivers.example"} <= imported
    loaded = {
        heavy: why
        for heavy, why in HEAVY.items()
        if any(name == heavy or name.startswith(heavy + ".") for name in imported)
    }
    assert not loaded, loaded
