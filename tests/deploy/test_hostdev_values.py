"""The chart with ``deploy/values/hostdev.yaml``: the hostdev driver with its config in
a ConfigMap the driver can read, the host's /dev, /sys and /run/udev mounted read-only,
and nothing privileged; the hostdev examples pass ``dralet validate --strict``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.conftest import CHART, KUBERNETES_VERSIONS, objects_schema_errors, only

from dralet.drivers.hostdev import load_config

Document = dict[str, Any]
Render = Callable[..., tuple[Document, ...]]
REPO = CHART.parents[2]
VALUES = REPO / "deploy" / "values" / "hostdev.yaml"
EXAMPLES = REPO / "deploy" / "hostdev" / "examples.yaml"
CONFIG_PATH = "/etc/dralet/driver-config.yaml"
V1_VERSIONS = [v for v in KUBERNETES_VERSIONS if int(v.split(".")[1]) >= 34]


def _container(documents: tuple[Document, ...]) -> Document:
    (container,) = only(documents, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_hostdev_values_render_objects_that_pass_the_strict_schemas(
    render: Render, version: str
) -> None:
    documents = render(version, (), (VALUES,))
    problems = objects_schema_errors(documents, version)
    assert problems == {name: [] for name in problems}


def test_the_driver_reads_its_config_from_the_configmap(render: Render) -> None:
    documents = render("1.37", (), (VALUES,))
    container = _container(documents)
    args = dict(arg.partition("=")[::2] for arg in container["args"])
    assert args["--driver"] == "hostdev"
    assert args["--driver-name"] == "hostdev.example.com"
    assert args["--driver-config"] == CONFIG_PATH
    assert "--gpus" not in args
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["driver-config"]["mountPath"] == str(Path(CONFIG_PATH).parent)
    config_map = only(documents, "ConfigMap")
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["driver-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    text = config_map["data"][Path(CONFIG_PATH).name]
    config = load_config(text, "ConfigMap")
    assert [g.name for g in config.groups] == ["loop", "fuse"]
    annotations = only(documents, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/driver-config"]) == 64


def test_a_config_change_rolls_the_pods(render: Render, tmp_path: Path) -> None:
    other = yaml.safe_load(VALUES.read_text())
    other["backend"]["config"]["groups"][1]["share"] = 8
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(other))

    def checksum(values: Path) -> str:
        daemonset = only(render("1.37", (), (values,)), "DaemonSet")
        return str(
            daemonset["spec"]["template"]["metadata"]["annotations"]["checksum/driver-config"]
        )

    assert checksum(VALUES) != checksum(changed)


def test_host_paths_are_mounted_read_only_at_the_same_paths_and_nothing_is_privileged(
    render: Render,
) -> None:
    documents = render("1.37", (), (VALUES,))
    container = _container(documents)
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for name, path in {"host-dev": "/dev", "host-sys": "/sys", "host-udev": "/run/udev"}.items():
        assert hosts[name] == path
        assert mounts[name]["mountPath"] == path
        assert mounts[name]["readOnly"] is True
    context = container["securityContext"]
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_privileged_is_a_value_and_drops_nothing(render: Render) -> None:
    context = _container(render("1.37", (("privileged", "true"),)))["securityContext"]
    assert (context["privileged"], context["allowPrivilegeEscalation"]) == (True, True)
    assert "capabilities" not in context


def test_a_host_mount_must_be_absolute(render: Render) -> None:
    from tests.deploy.conftest import RenderError

    with pytest.raises(RenderError, match="hostPath"):
        render("1.37", (("hostMounts[0].name", "dev"), ("hostMounts[0].hostPath", "dev")))


@pytest.mark.parametrize("version", V1_VERSIONS)
def test_the_hostdev_examples_pass_dralet_validate_strict(version: str) -> None:
    from dralet.validation.targets import SUPPORTED_KUBERNETES_VERSIONS

    target = (
        version
        if version in SUPPORTED_KUBERNETES_VERSIONS
        else max(SUPPORTED_KUBERNETES_VERSIONS, key=lambda v: int(v.split(".")[1]))
    )
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "dralet.cli.main",
            "validate",
            "-k",
            target,
            "--strict",
            str(EXAMPLES),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
