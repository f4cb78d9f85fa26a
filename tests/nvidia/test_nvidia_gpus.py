"""The NVIDIA driver's whole GPUs over a fake NVML (a DGX H100): what it publishes, the
device nodes a prepared GPU gets, what it reads back after a reboot, and health when a
GPU falls off the bus."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import dralet
from dralet.cdi.store import SpecStore
from dralet.drivers.nvidia.backend import NvidiaGpus, semantic_version
from dralet.drivers.nvidia.factory import factory, nvidia_gpus
from dralet.drivers.nvidia.nvml import Nvml, NvmlError
from dralet.node.devices import device_to_json
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.nvidia.fakenvml import FakeNvml

DRIVER = "gpu.nvidia.com"


def fake_dev(root: Path, *, gpus: int = 8, modeset: bool = False) -> Path:
    """A /dev tree with the nodes' names (regular files stand in for the device nodes)."""
    dev = root / "dev"
    dev.mkdir(parents=True)
    names = [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    for name in names + (["nvidia-modeset"] if modeset else []):
        (dev / name).write_text("")
    return root


def one_device(device: str, uid: str = "u") -> dralet.ClaimAllocation:
    """A claim's allocation of one device, as prepare and release get it."""
    return dralet.ClaimAllocation(
        claim=dralet.ClaimRef(dralet.ClaimUID(uid), "default", "c"),
        devices=(dralet.AllocatedDevice(request="gpu", pool="node-a", device=device),),
    )


def backend(tmp: Path, nvml: FakeNvml | None = None) -> NvidiaGpus:
    settings = node_settings(tmp / "node", driver_name=DRIVER)
    return NvidiaGpus(
        Nvml(nvml or FakeNvml()),
        ledger_dir=settings.plugin_dir,
        dev_root=fake_dev(tmp / "host"),
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("550.54.15", "550.54.15"),
        ("535.104.05", "535.104.5"),
        ("560.28", "560.28.0"),
        ("570", "570.0.0"),
        ("r550", None),
    ],
)
def test_driver_versions_become_strict_semver(text: str, version: str | None) -> None:
    got = semantic_version(text)
    assert (got.value if got else None) == version


def test_every_gpu_is_published_with_what_users_select_on(tmp_path: Path) -> None:
    devices = [device_to_json(d) for d in backend(tmp_path).devices()]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    first, last = devices[0], devices[7]
    attributes = first["attributes"]
    assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attributes["architecture"] == {"string": "Hopper"}
    assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attributes["driverVersion"] == {"version": "550.54.15"}
    assert attributes["pciBusID"] == {"string": "00000000:18:00.0"}
    assert attributes["uuid"]["string"].startswith("GPU-")
    assert (attributes["numaNode"], last["attributes"]["numaNode"]) == ({"int": 0}, {"int": 1})
    assert first["capacity"] == {"memory": {"value": "81559Mi"}}
    assert len({d["attributes"]["uuid"]["string"] for d in devices}) == 8


def test_without_numa_support_the_attribute_is_left_out(tmp_path: Path) -> None:
    (device, *_) = backend(tmp_path, FakeNvml(numa_supported=False)).devices()
    assert "numaNode" not in device.attributes


def test_a_lost_gpu_keeps_the_others_names(tmp_path: Path) -> None:
    nvml = FakeNvml()
    nvml.lose(2)
    names = [d.name for d in backend(tmp_path, nvml).devices()]
    assert names == [f"gpu-{i}" for i in (0, 1, 3, 4, 5, 6, 7)]


async def test_a_prepared_gpu_gets_its_node_and_the_control_nodes(short_tmp: Path) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    nvml = FakeNvml()
    gpus = NvidiaGpus(
        Nvml(nvml),
        ledger_dir=settings.plugin_dir,
        dev_root=fake_dev(short_tmp / "host"),
    )
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c", driver=DRIVER, devices=[("gpu", "gpu-3")]))
    uid = claim["metadata"]["uid"]
    async with running_node(settings, gpus, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        (device,) = (SpecStore(settings.cdi_dir, settings.cdi_kind).read(uid) or {})["devices"]
        edits = device["containerEdits"]
        host = short_tmp / "host" / "dev"
        assert edits["deviceNodes"] == [
            {"path": path, "hostPath": str(host / path.removeprefix("/dev/"))}
            for path in (
                "/dev/nvidia3",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
            )
        ]
        assert edits["env"] == [f"DRALET_NVIDIA_GPU_3={nvml.gpus[3].uuid}"]
        assert gpus.devices_in_use() == {"gpu-3": uid}

        nvml.fail = "Driver Not Loaded"
        unknown = gpus.health()["gpu-3"]
        assert unknown.status is dralet.HealthStatus.UNKNOWN
        assert "Driver Not Loaded" in unknown.message
        nvml.fail = ""
        nvml.lose(3)
        health = gpus.health()
        assert health["gpu-3"].status is dralet.HealthStatus.UNHEALTHY
        assert health["gpu-0"].status is dralet.HealthStatus.HEALTHY

        assert (await node.unprepare(claim)).kubelet_error == ""
        assert gpus.devices_in_use() == {}


async def test_a_gpu_that_is_not_there_fails_its_claim(short_tmp: Path) -> None:
    settings = node_settings(short_tmp / "node", driver_name=DRIVER)
    gpus = backend(short_tmp)
    claims = MemoryClaims()
    gone = claims.add(allocated_claim("gone", driver=DRIVER, devices=[("gpu", "gpu-9")]))
    async with running_node(settings, gpus, claims=claims) as node:
        result = await node.prepare(gone)
        assert "GPU gpu-9 is not on this node now" in result.claims[gone["metadata"]["uid"]].error
        assert gpus.devices_in_use() == {}


def test_only_the_same_gpu_survives_a_reboot(tmp_path: Path) -> None:
    nvml = FakeNvml()
    gpus = backend(tmp_path, nvml)
    device = dralet.AllocatedDevice(request="gpu", pool="node-a", device="gpu-1")
    state = {"uuid": nvml.gpus[1].uuid, "minor": 1}
    assert gpus.survives_reboot(device, state)
    nvml.gpus[1].uuid = "GPU-00000000-0000-0000-0000-000000000001"  # a replaced board
    assert not gpus.survives_reboot(device, state)


def test_what_dralets_records_hold_is_in_use_until_released(tmp_path: Path) -> None:
    nvml = FakeNvml()
    gpus = backend(tmp_path, nvml)
    assert gpus.devices_in_use() == {}, "a whole GPU keeps no record of its claim"
    state = {"uuid": nvml.gpus[2].uuid, "minor": 2}
    gpus.restore_held([dralet.HeldDevice(dralet.ClaimUID("u"), "gpu-2", state)])
    assert gpus.devices_in_use() == {"gpu-2": "u"}
    nvml.lose(2)
    assert gpus.health()["gpu-2"].status is dralet.HealthStatus.UNHEALTHY
    gpus.release_claim(one_device("gpu-2"), [state])
    assert gpus.devices_in_use() == {}


def test_nvml_is_initialised_only_while_used(tmp_path: Path) -> None:
    nvml = FakeNvml()
    backend(tmp_path, nvml).devices()
    assert nvml.inits == 0


def test_without_the_nvml_library_the_error_names_it(tmp_path: Path) -> None:
    """The real binding on a machine without the NVIDIA driver: one clear error."""
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    gpus = factory(settings, dralet.DriverConfig())
    with pytest.raises(NvmlError, match=r"^nvmlInit: .*(Library Not Found|Driver Not Loaded)"):
        gpus.devices()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"gpus": "2"}, "unknown setting(s) gpus"),
        ({"dev-root": "host"}, "must be an absolute path"),
    ],
)
def test_the_factory_refuses_what_it_does_not_take(
    tmp_path: Path, options: dict[str, str], problem: str
) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    with pytest.raises(
        dralet.DriverLoadError, match=problem.replace("(", r"\(").replace(")", r"\)")
    ):
        nvidia_gpus(settings, dralet.DriverConfig(options=options), library=FakeNvml())


def test_the_factory_takes_a_dev_root(tmp_path: Path) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    config = dralet.DriverConfig(options={"dev-root": "/host"})
    assert nvidia_gpus(settings, config, library=FakeNvml()).dev_root == Path("/host")


def test_another_binding_is_named_by_module_and_name(tmp_path: Path) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    config = dralet.DriverConfig(options={"nvml-library": "tests.nvidia.fakenvml:FakeNvml"})
    assert len(factory(settings, config).devices()) == 8


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("tests.nvidia.fakenvml", "expected MODULE:NAME"),
        ("tests.nvidia.fakenvml:Missing", "has no attribute 'Missing'"),
        ("no_such_module:x", "No module named 'no_such_module'"),
    ],
)
def test_a_binding_that_cannot_be_loaded_is_one_clear_error(
    tmp_path: Path, target: str, problem: str
) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    config = dralet.DriverConfig(options={"nvml-library": target})
    with pytest.raises(dralet.DriverLoadError, match=f"nvmlLibrary {target}: .*{problem}"):
        factory(settings, config)


@pytest.mark.parametrize(
    ("path", "problem"),
    [("lib/libnvidia-ml.so.1", "must be an absolute path"), ("/nonexistent/x.so", "x.so")],
)
def test_a_library_path_that_cannot_be_loaded_is_one_clear_error(
    tmp_path: Path, path: str, problem: str
) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    config = dralet.DriverConfig(options={"nvml-library-path": path})
    with pytest.raises(dralet.DriverLoadError, match=f"nvmlLibraryPath {path}: .*{problem}"):
        factory(settings, config)


def test_an_xid_that_breaks_the_gpu_makes_it_unhealthy_and_an_application_xid_does_not(
    tmp_path: Path,
) -> None:
    nvml = FakeNvml()
    gpus = backend(tmp_path, nvml)
    gpus.xids.wait_ms = 20
    try:
        assert gpus.health()["gpu-2"].status is dralet.HealthStatus.HEALTHY
        nvml.xid(2, 13)  # a program's own fault
        nvml.xid(5, 79)
        deadline = time.monotonic() + 10
        while "gpu-5" not in [n for n, h in gpus.health().items() if h.status.name == "UNHEALTHY"]:
            assert time.monotonic() < deadline, "XID 79 never made gpu-5 unhealthy"
            time.sleep(0.02)
        health = gpus.health()
        assert health["gpu-5"].message == "XID 79 (GPU has fallen off the bus)"
        assert health["gpu-2"].status is dralet.HealthStatus.HEALTHY
        assert nvml.pending == []
    finally:
        gpus.xids.stop()


def test_with_the_toolkit_spec_a_device_gets_its_id_and_only_env_of_dralets(
    tmp_path: Path,
) -> None:
    nvml = FakeNvml()
    settings = node_settings(tmp_path / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(nvml), ledger_dir=settings.plugin_dir, dev_root=tmp_path, toolkit_cdi=True
    )
    allocation = one_device("gpu-4")
    (prepared,) = gpus.prepare_claim(allocation)
    assert list(prepared.external_cdi_ids) == [f"nvidia.com/gpu={nvml.gpus[4].uuid}"]
    assert prepared.edits.device_nodes == ()
    assert prepared.edits.env == (f"DRALET_NVIDIA_GPU_4={nvml.gpus[4].uuid}",)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"toolkit-cdi": "yes"}, "toolkitCdi yes: expected true or false"),
        ({"toolkit-cdi": "true", "mig": "dynamic"}, "cannot name MIG devices made after"),
    ],
)
def test_the_factory_checks_the_toolkit_setting(
    tmp_path: Path, options: dict[str, str], problem: str
) -> None:
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name=DRIVER))
    with pytest.raises(dralet.DriverLoadError, match=problem):
        nvidia_gpus(settings, dralet.DriverConfig(options=options), library=FakeNvml())


def driver_root(root: Path, version: str = "550.54.15") -> Path:
    """A driver root as the NVIDIA installer leaves it (files named by the version)."""
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        (lib / f"{name}.{version}").write_text(f"{name} {version}\n")
        (lib / f"{name}.1").symlink_to(f"{name}.{version}")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho fake nvidia-smi\n")
    return root


def test_a_prepared_gpu_gets_the_drivers_libraries_from_the_host_root(tmp_path: Path) -> None:
    settings = node_settings(tmp_path / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(FakeNvml()),
        ledger_dir=settings.plugin_dir,
        dev_root=fake_dev(tmp_path / "host"),
        driver_root=driver_root(tmp_path / "driver-root"),
        host_driver_root=Path("/run/nvidia/driver"),
    )
    allocation = one_device("gpu-0")
    (prepared,) = gpus.prepare_claim(allocation)
    mounts = {m.container_path: m.host_path for m in prepared.edits.mounts}
    lib = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    assert mounts == {
        "/usr/local/nvidia/lib64/libcuda.so.550.54.15": f"{lib}/libcuda.so.550.54.15",
        "/usr/local/nvidia/lib64/libcuda.so.1": f"{lib}/libcuda.so.550.54.15",
        "/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.15": f"{lib}/libnvidia-ml.so.550.54.15",
        "/usr/local/nvidia/lib64/libnvidia-ml.so.1": f"{lib}/libnvidia-ml.so.550.54.15",
        "/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.550.54.15": (
            f"{lib}/libnvidia-ptxjitcompiler.so.550.54.15"
        ),
        "/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1": (
            f"{lib}/libnvidia-ptxjitcompiler.so.550.54.15"
        ),
        "/usr/local/nvidia/bin/nvidia-smi": "/run/nvidia/driver/usr/bin/nvidia-smi",
    }
    assert all("ro" in m.options for m in prepared.edits.mounts)


def test_without_the_drivers_libraries_a_gpu_gets_no_mounts(tmp_path: Path) -> None:
    settings = node_settings(tmp_path / "node", driver_name=DRIVER)
    gpus = NvidiaGpus(
        Nvml(FakeNvml()),
        ledger_dir=settings.plugin_dir,
        dev_root=fake_dev(tmp_path / "host"),
        driver_root=tmp_path / "empty",
    )
    allocation = one_device("gpu-0")
    (prepared,) = gpus.prepare_claim(allocation)
    assert prepared.edits.mounts == ()
