"""The chart with ``deploy/values/nvidia.yaml``: the NVIDIA driver on GPU nodes, its
configuration in a ConfigMap it accepts, the host paths it needs, privileged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.conftest import CHART, KUBERNETES_VERSIONS, objects_schema_errors, only
from tests.nvidia.fakenvml import FakeNvml

import dralet
from dralet.drivers.nvidia.factory import nvidia_gpus
from dralet.testing import node_settings

Document = dict[str, Any]
Render = Callable[..., tuple[Document, ...]]
VALUES = CHART.parents[2] / "deploy" / "values" / "nvidia.yaml"
CONFIG_PATH = "/etc/dralet/driver-config.yaml"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_nvidia_values_render_objects_that_pass_the_strict_schemas(
    render: Render, version: str
) -> None:
    documents = render(version, (), (VALUES,))
    problems = objects_schema_errors(documents, version)
    assert problems == {name: [] for name in problems}


def test_the_driver_runs_on_gpu_nodes_with_the_host_paths_it_needs(
    render: Render, tmp_path: Path
) -> None:
    documents = render("1.37", (), (VALUES,))
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = dict(arg.partition("=")[::2] for arg in container["args"])
    assert (args["--driver"], args["--driver-name"]) == ("nvidia", "gpu.nvidia.com")
    assert args["--driver-config"] == CONFIG_PATH
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert container["securityContext"]["privileged"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {"/dev", "/host/proc/driver/nvidia", "/driver-root/usr/lib/x86_64-linux-gnu"} <= set(
        mounts
    )
    assert all(mounts[p]["readOnly"] for p in ("/dev", "/host/proc/driver/nvidia"))
    # The ConfigMap holds settings the driver takes (its library path is checked when it
    # loads, so it is left out here).
    text = only(documents, "ConfigMap")["data"][Path(CONFIG_PATH).name]
    config = yaml.safe_load(text)
    assert config["mig"] == "existing"
    assert config["nvmlLibraryPath"].startswith("/driver-root/")
    del config["nvmlLibraryPath"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = dralet.Settings(node_settings(tmp_path / "node", driver_name="gpu.nvidia.com"))
    gpus = nvidia_gpus(settings, dralet.DriverConfig.read(path), library=FakeNvml())
    assert (gpus.mig_mode, gpus.proc_root) == ("existing", Path("/host/proc"))
    assert (gpus.driver_root, gpus.host_driver_root) == (Path("/driver-root"), Path("/"))
    assert "/driver-root/usr/bin" in mounts
