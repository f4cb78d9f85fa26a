"""MIG on the NVIDIA driver over the fake NVML (a DGX H100 whose GPU 0 is in MIG mode):
what each mode publishes, the MIG devices prepare makes and release destroys, and the
instances a crash leaves behind being found again."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

import dralet
from dralet.cdi.store import SpecStore
from dralet.drivers.nvidia import mig
from dralet.drivers.nvidia.backend import NvidiaGpus
from dralet.drivers.nvidia.factory import nvidia_gpus
from dralet.drivers.nvidia.nvml import Nvml, _Placement
from dralet.node.devices import counter_set_to_json, device_to_json
from dralet.node.published import build_pool
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.nvidia.fakenvml import FakeNvml
from tests.nvidia.test_nvidia_gpus import DRIVER, fake_dev, one_device

H100_PLACEMENTS = 7 + 7 + 4 + 3 + 2 + 1 + 1
"""1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb."""


def mig_nvml(host: Path, *, gpus: set[int] | None = None) -> FakeNvml:
    return FakeNvml(mig=gpus if gpus is not None else {0}, proc_root=host / "proc", dev_root=host)


def make(nvml: FakeNvml, gpu: int, profile_id: int, start: int, size: int) -> tuple[int, int]:
    """Make a MIG device the way an administrator would (nvidia-smi mig -cgi ... -C)."""
    handle = nvml.gpus[gpu]
    nvml.inits += 1
    try:
        placement = _Placement(start, size)
        gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, profile_id, ctypes.byref(placement)
        )
        slices = {19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}[profile_id]
        ci_profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]
        ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        return gi.id, ci.id
    finally:
        nvml.inits -= 1


def instances(nvml: FakeNvml, gpu: int = 0) -> dict[str, dict[str, object]]:
    return dict(nvml.instances.get(str(gpu), {}))


def backend(tmp: Path, nvml: FakeNvml, *, mode: str) -> NvidiaGpus:
    settings = node_settings(tmp / "node", driver_name=DRIVER)
    return NvidiaGpus(
        Nvml(nvml),
        ledger_dir=settings.plugin_dir,
        dev_root=tmp / "host",
        proc_root=tmp / "host" / "proc",
        mig_mode=mode,
    )


def test_existing_mode_offers_the_mig_devices_that_exist_and_not_their_gpu(tmp_path: Path) -> None:
    host = fake_dev(tmp_path / "host")
    nvml = mig_nvml(host)
    make(nvml, 0, 19, 0, 1)  # 1g.10gb at slice 0
    make(nvml, 0, 9, 4, 4)  # 3g.40gb at slices 4-7
    gpus = backend(tmp_path, nvml, mode="existing")
    devices = {d.name: device_to_json(d) for d in gpus.devices()}
    assert "gpu-0" not in devices
    assert sorted(n for n in devices if "-mig-" in n) == [
        "gpu-0-mig-1g-10gb-0",
        "gpu-0-mig-3g-40gb-4",
    ]
    small = devices["gpu-0-mig-1g-10gb-0"]
    assert small["attributes"]["profile"] == {"string": "1g.10gb"}
    assert small["attributes"]["uuid"]["string"].startswith("MIG-")
    assert small["attributes"]["parentUUID"] == {"string": nvml.gpus[0].uuid}
    assert small["capacity"]["memory"] == {"value": "9984Mi"}
    assert small["capacity"]["multiprocessors"] == {"value": "16"}
    assert "consumesCounters" not in small
    assert gpus.counter_sets() == []
    assert len([n for n in devices if "-mig-" not in n]) == 7


def test_dynamic_mode_offers_every_placement_over_one_counter_set_per_gpu(tmp_path: Path) -> None:
    host = fake_dev(tmp_path / "host")
    gpus = backend(tmp_path, mig_nvml(host), mode="dynamic")
    devices = gpus.devices()
    placements = [d for d in devices if "-mig-" in d.name]
    assert len(placements) == H100_PLACEMENTS
    assert all(d.partition for d in placements)
    (counters,) = [counter_set_to_json(c) for c in gpus.counter_sets()]
    assert counters["name"] == "gpu-0-mig"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(counters["counters"])
    assert counters["counters"]["multiprocessors"] == {"value": "132"}
    three = device_to_json(next(d for d in devices if d.name == "gpu-0-mig-3g-40gb-4"))
    (consumed,) = three["consumesCounters"]
    slices = sorted(k for k in consumed["counters"] if k.startswith("memory-slice-"))
    assert slices == [f"memory-slice-{i}" for i in (4, 5, 6, 7)]
    assert consumed["counters"]["multiprocessors"] == {"value": "60"}
    built = build_pool(
        devices,
        driver=DRIVER,
        pool="node-a",
        node_name="node-a",
        counter_sets=gpus.counter_sets(),
        served=frozenset({"DRAPartitionableDevices"}),
    )
    assert built.skipped == ()
    # On a cluster without partitionable devices only the whole GPUs are published.
    old = build_pool(devices, driver=DRIVER, pool="node-a", node_name="node-a", served=frozenset())
    assert sorted(d["name"] for chunk in old.chunks for d in chunk) == [
        f"gpu-{i}" for i in range(1, 8)
    ]


async def test_prepare_makes_the_mig_device_and_release_destroys_it(short_tmp: Path) -> None:
    host = fake_dev(short_tmp / "host")
    nvml = mig_nvml(host)
    gpus = backend(short_tmp, nvml, mode="dynamic")
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    claims = MemoryClaims()
    claim = claims.add(
        allocated_claim("c", driver=DRIVER, devices=[("mig", "gpu-0-mig-2g-20gb-2")])
    )
    uid = claim["metadata"]["uid"]
    async with running_node(settings, gpus, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        (made,) = instances(nvml).values()
        assert (made["profile"], made["start"]) == (14, 2)
        (device,) = (SpecStore(settings.cdi_dir, settings.cdi_kind).read(uid) or {})["devices"]
        paths = [n["path"] for n in device["containerEdits"]["deviceNodes"]]
        caps = [p for p in paths if p.startswith("/dev/nvidia-caps/")]
        assert paths[0] == "/dev/nvidia0" and len(caps) == 2
        (env,) = device["containerEdits"]["env"]
        assert env.startswith("DRALET_NVIDIA_GPU_0=MIG-")
        assert gpus.devices_in_use() == {"gpu-0-mig-2g-20gb-2": uid}
        assert set(gpus.ledger.read()) == {"gpu-0-mig-2g-20gb-2"}

        again = await node.prepare(claim)
        assert again.kubelet_error == ""
        assert len(instances(nvml)) == 1  # the same claim twice makes one MIG device

        assert (await node.unprepare(claim)).kubelet_error == ""
        assert instances(nvml) == {}
        assert gpus.ledger.read() == {}
        assert gpus.devices_in_use() == {}
        assert (await node.unprepare(claim)).kubelet_error == ""


async def test_overlapping_placements_fail_the_second_claim_only(short_tmp: Path) -> None:
    host = fake_dev(short_tmp / "host")
    nvml = mig_nvml(host)
    gpus = backend(short_tmp, nvml, mode="dynamic")
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    claims = MemoryClaims()
    first = claims.add(allocated_claim("a", driver=DRIVER, devices=[("m", "gpu-0-mig-4g-40gb-0")]))
    second = claims.add(allocated_claim("b", driver=DRIVER, devices=[("m", "gpu-0-mig-1g-10gb-2")]))
    async with running_node(settings, gpus, claims=claims) as node:
        assert (await node.prepare(first)).kubelet_error == ""
        result = await node.prepare(second)
        assert "Insufficient Resources" in result.claims[second["metadata"]["uid"]].error
        assert list(gpus.ledger.read()) == ["gpu-0-mig-4g-40gb-0"]
        assert len(instances(nvml)) == 1


async def test_a_mig_device_an_administrator_made_is_used_but_never_destroyed(
    short_tmp: Path,
) -> None:
    host = fake_dev(short_tmp / "host")
    nvml = mig_nvml(host)
    make(nvml, 0, 19, 5, 1)
    gpus = backend(short_tmp, nvml, mode="dynamic")
    theirs = next(d for d in gpus.devices() if d.name == "gpu-0-mig-1g-10gb-5")
    assert not theirs.partition and "uuid" in theirs.attributes
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("m", "gpu-0-mig-1g-10gb-5")]))
    async with running_node(settings, gpus, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert gpus.ledger.read() == {}
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert len(instances(nvml)) == 1


def test_a_mig_device_made_before_a_crash_is_destroyed_by_placement(tmp_path: Path) -> None:
    """Killed after NVML made it, before its ids were written: the ledger names the
    claim and the placement, and release finds it there."""
    host = fake_dev(tmp_path / "host")
    nvml = mig_nvml(host)
    gpus = backend(tmp_path, nvml, mode="dynamic")
    gpus.ledger.put("gpu-0-mig-3g-40gb-0", {"claim": "uid-1", "gpu": nvml.gpus[0].uuid})
    make(nvml, 0, 9, 0, 4)
    assert gpus.devices_in_use() == {"gpu-0-mig-3g-40gb-0": "uid-1"}
    allocation = one_device("gpu-0-mig-3g-40gb-0", uid="uid-1")
    gpus.release_claim(allocation, [{}])
    assert instances(nvml) == {}
    assert gpus.ledger.read() == {}
    gpus.release_claim(allocation, [{}])  # again: nothing left, no error


async def test_recovery_destroys_a_mig_device_whose_claim_has_no_record(short_tmp: Path) -> None:
    host = fake_dev(short_tmp / "host")
    nvml = mig_nvml(host)
    gpus = backend(short_tmp, nvml, mode="dynamic")
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    async with running_node(settings, gpus):
        pass  # the node has a claim store, in which the claim below has no record
    gi, ci = make(nvml, 0, 14, 0, 2)
    gpus.ledger.put(
        "gpu-0-mig-2g-20gb-0", {"claim": "gone-uid", "gpu": nvml.gpus[0].uuid, "gi": gi, "ci": ci}
    )
    async with running_node(settings, gpus):
        pass
    assert instances(nvml) == {}
    assert gpus.ledger.read() == {}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"mig": "always"}, "mig always: expected one of existing, dynamic"),
        ({"proc-root": "p"}, "absolute"),
    ],
)
def test_the_factory_checks_the_mig_settings(
    tmp_path: Path, options: dict[str, str], problem: str
) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    with pytest.raises(dralet.DriverLoadError, match=problem):
        nvidia_gpus(settings, dralet.DriverConfig(options=options), library=FakeNvml())


def test_the_factory_takes_the_mig_mode(tmp_path: Path) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    config = dralet.DriverConfig(options={"mig": "dynamic", "proc-root": "/host/proc"})
    gpus = nvidia_gpus(settings, config, library=FakeNvml())
    assert (gpus.mig_mode, gpus.proc_root) == ("dynamic", Path("/host/proc"))
    assert mig.MIG_MODES == ("existing", "dynamic")


async def test_a_gpu_instance_left_without_its_compute_instance_is_finished_or_destroyed(
    short_tmp: Path,
) -> None:
    """Killed between the two NVML steps: no MIG device shows the GPU instance, yet the
    ledger's claim finishes it on a retry, and release destroys what is there."""
    host = fake_dev(short_tmp / "host")
    nvml = mig_nvml(host)
    gpus = backend(short_tmp, nvml, mode="dynamic")
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("m", "gpu-0-mig-1g-20gb-2")]))
    uid = claim["metadata"]["uid"]
    async with running_node(settings, gpus, claims=claims):
        pass  # a node with a claim store: a backend hold beside no store would be a lost one
    nvml.inits += 1
    gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        nvml.gpus[0], 15, ctypes.byref(_Placement(2, 2))
    )
    nvml.inits -= 1
    gpus.ledger.put("gpu-0-mig-1g-20gb-2", {"claim": uid, "gpu": nvml.gpus[0].uuid, "gi": gi.id})
    async with running_node(settings, gpus, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        (made,) = instances(nvml).values()
        assert made["cis"] == [0]
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert instances(nvml) == {}
