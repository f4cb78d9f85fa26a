"""``dralet run --driver hostdev --config FILE`` as a process gives a real loop device of
this machine to a podman container, which writes to it and reads it back; the host sees
the bytes in the loop device's backing file. A second claim on the exclusive device is
refused until the first is released."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator
from tests.harness import podman

pytestmark = [pytest.mark.e2e, pytest.mark.runtime]

AVAILABLE = podman.available()
DRIVER = "hostdev.example.com"
MESSAGE = "dralet-hostdev-loop-check"


@contextlib.contextmanager
def loop_device(backing: Path) -> Iterator[str]:
    """A loop device of this machine over ``backing`` (1 MiB of zeros), detached after."""
    if shutil.which("losetup") is None or not Path("/dev/loop-control").exists():
        pytest.skip("no loop devices here (losetup, /dev/loop-control)")
    backing.write_bytes(bytes(1 << 20))
    try:
        attached = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
            capture_output=True,
            text=True,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot attach a loop device: {exc.stderr.strip()}")
    device = attached.stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)


@pytest.mark.skipif(not AVAILABLE, reason=f"no container runtime: {AVAILABLE.reason}")
async def test_a_container_writes_and_reads_back_a_real_loop_device(
    tmp_path: Path, short_tmp: Path
) -> None:
    backing = tmp_path / "backing.img"
    with loop_device(backing) as device:
        name = device.rsplit("/", 1)[1]  # loop3: the kernel's own, stable name of it
        config = tmp_path / "loop.yaml"
        config.write_text(
            "groups:\n  - name: loop\n"
            f"    match: {{paths: [{device}], type: block}}\n"
            "    naming: [sysfs]\n    containerPath: /dev/hostdev-loop\n"
            "    capacity: {size: {sysfs: size, scale: 512}}\n"
        )
        async with ApiServer(kubernetes_version="1.37") as api:
            cluster = ControlPlane(api, driver_name=DRIVER)
            cluster.add_node()
            paths = DriverPaths(short_tmp / "node", driver_name=DRIVER)
            driver = DriverProcess(
                driver_args(paths, api_url=api.url, driver="hostdev", driver_config=config),
                log_path=tmp_path / "driver.log",
                mode="exec",
            )
            kubelet = KubeletEmulator(paths.registry_dir, kubelet_version="1.37")
            driver.start()
            try:
                plugin = await kubelet.wait_for_plugin(DRIVER, within=30)
                published = await _published(api, within=30)
                assert published == {f"loop-{name}": str(1 << 20)}, driver.log()

                first = cluster.allocate_claim("first", [("disk", f"loop-{name}")])
                second = cluster.allocate_claim("second", [("disk", f"loop-{name}")])
                prepared = await plugin.prepare([first])
                assert prepared.kubelet_error == "", driver.log()
                ids = prepared.cdi_ids(first.uid)

                script = (
                    f"printf %s {MESSAGE} | dd of=/dev/hostdev-loop conv=fsync 2>/dev/null"
                    f" && head -c {len(MESSAGE)} /dev/hostdev-loop"
                )
                run = await asyncio.to_thread(
                    podman.run_container, paths.cdi_dir, ids, command=["sh", "-c", script]
                )
                assert run.ok, (run.exit_code, run.stderr, run.cdi_error)
                assert run.stdout == MESSAGE
                node = run.dev["/dev/hostdev-loop"]
                major, minor = _numbers(device)
                assert (node.type, node.major, node.minor) == ("b", major, minor), node
                assert backing.read_bytes()[: len(MESSAGE)] == MESSAGE.encode()

                refused = await plugin.prepare([second])
                assert (
                    f"is still prepared for claim {first.uid}" in refused.claims[second.uid].error
                )
                assert (await plugin.unprepare([first])).kubelet_error == ""
                gone = await asyncio.to_thread(podman.run_container, paths.cdi_dir, ids)
                assert gone.unresolvable, (gone.exit_code, gone.stderr)
                assert (await plugin.prepare([second])).kubelet_error == ""
                assert (await plugin.unprepare([second])).kubelet_error == ""
            finally:
                await kubelet.close()
                await driver.terminate()
    assert not list(paths.cdi_dir.glob("*.json"))


def _numbers(device: str) -> tuple[int, int]:
    info = os.stat(device)
    return os.major(info.st_rdev), os.minor(info.st_rdev)


async def _published(api: ApiServer, *, within: float) -> dict[str, str]:
    """Device name → its ``size`` capacity, once the driver's slice is published."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        devices = [d for s in api.list("ResourceSlice") for d in s["spec"].get("devices", ())]
        if devices or loop.time() > deadline:
            return {d["name"]: d.get("capacity", {}).get("size", {}).get("value") for d in devices}
        await asyncio.sleep(0.2)
