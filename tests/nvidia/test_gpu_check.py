"""``scripts/gpu-check`` over the fake NVML standing in for ``pynvml`` (GPU 0 in MIG mode
with one MIG device) and a fake /dev: it lists what the driver would publish, MIG
included, and the driver passes ``dralet conformance`` (the script exits 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.nvidia.test_nvidia_gpus import fake_dev

REPOSITORY = Path(__file__).resolve().parents[2]

FAKE_PYNVML = """
from tests.nvidia.fakenvml import FakeNvml, NVMLError
import ctypes
from dralet.drivers.nvidia.nvml import _Placement

_fake = FakeNvml(mig={0})
_fake.inits += 1
_where = ctypes.byref(_Placement(4, 4))
_gi = _fake.nvmlDeviceCreateGpuInstanceWithPlacement(_fake.gpus[0], 9, _where)
_fake.nvmlGpuInstanceCreateComputeInstance(_gi, 2)
_fake.inits -= 1


def __getattr__(name):
    return getattr(_fake, name)
"""


def test_gpu_check_lists_mig_and_passes_conformance(tmp_path: Path) -> None:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPOSITORY}",
        "DRALET_VENV": str(Path(sys.executable).parent.parent),
        "GPU_CHECK_DEV_ROOT": str(fake_dev(tmp_path / "host")),
    }
    out = subprocess.run(
        [str(REPOSITORY / "scripts" / "gpu-check")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=240,
    ).stdout
    assert "GPU 0: MIG on (pending on)" in out
    assert "3g.40gb      id  9  3 compute / 4 memory slices" in out
    assert "MIG device MigDevice(uuid='MIG-" in out
    assert "`mig: dynamic` would publish 24 placements" in out
    assert '"name": "gpu-0-mig"' in out
    assert "a claim on gpu-1 gets the device nodes ['/dev/nvidia1'" in out
    assert "the driver under dralet conformance" in out
    assert "health of 32 devices: {'healthy': 32}" in out
    assert "XID watch: waiting on NVML events" in out
