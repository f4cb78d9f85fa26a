"""dralet with a real kubelet (of each release CI builds, with containerd 2 and runc): the
kubelet registers the
example driver from its plugin registry, the scheduler allocates a pod's claim, the
kubelet calls NodePrepareResources, containerd creates the container from dralet's CDI
spec (the container sees the device node and the environment), and when the pod has
run the kubelet unprepares: the spec and the finalizer go, and the claim with the pod.

Optional (tests/realkubelet.py says what this sandbox needs for it): skipped with the
reason where the binaries or root are missing; CI builds and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dralet.cluster import DriverPaths, DriverProcess, driver_args
from tests import realkubelet
from tests.k8s.drivernode import eventually
from tests.k8sapi import ClusterApi
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.kubelet,
    pytest.mark.every_k8s_release,
    pytest.mark.e2e,
    K8S_TIMEOUT,
]

DRIVER = "gpu.example.com"
NS = "default"
WAIT = 120.0
LOG_WAIT = 10.0
"""How long the container's log may lag behind its pod's phase: containerd's exit handling
waits until the container's output is handed to the log writer's goroutine, not until that
goroutine has written it to the file (containerd v2.4.2 internal/cri/io/logger.go,
NewCRILogger; internal/cri/server/container_start.go, createContainerLoggers)."""


@pytest.fixture
async def kubelet(k8s_api: ClusterApi) -> AsyncIterator[realkubelet.RealKubelet]:
    release = k8s_api.cluster.release
    reason = realkubelet.missing(release)
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the real kubelet: {reason}", pytrace=False)
        pytest.skip(reason)
    cm = realkubelet.real_kubelet(k8s_api.cluster.admin_kubeconfig, release=release)
    node = await asyncio.to_thread(cm.__enter__)
    try:
        yield node
    finally:
        await asyncio.to_thread(cm.__exit__, None, None, None)


def _ready(api: ClusterApi, name: str) -> bool:
    node = api.get("Node", name) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions") or []
    )


async def test_a_real_kubelet_prepares_runs_and_releases_a_claim(
    k8s_api: ClusterApi, kubelet: realkubelet.RealKubelet, short_tmp: Path
) -> None:
    api = k8s_api
    await eventually(lambda: _ready(api, kubelet.node_name), "the kubelet's node Ready", WAIT)
    paths = DriverPaths(short_tmp, driver_name=DRIVER, node_name=kubelet.node_name)
    extra = [
        "--plugin-dir", str(kubelet.plugins_dir / DRIVER),
        "--registry-dir", str(kubelet.registry_dir),
        "--cdi-dir", str(kubelet.cdi_dir),
        "--kubeconfig", str(api.driver_kubeconfig()),
    ]  # fmt: skip
    driver = DriverProcess(
        driver_args(paths, api_url=None, gpus=2, extra=extra), log_path=short_tmp / "driver.log"
    )
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    driver.start()
    try:
        await eventually(
            lambda: "registered with the kubelet" in driver.log(), "the kubelet registered it", WAIT
        )
        api.wait_for_default_service_account()
        api.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu", "namespace": NS},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]
                        }
                    }
                },
            }
        )
        api.create(_pod(kubelet.node_name))

        def phase() -> str | None:
            current = api.get("Pod", "gpu-user", namespace=NS) or {}
            value = current.get("status", {}).get("phase")
            return str(value) if value in ("Succeeded", "Failed") else None

        assert await eventually(phase, "the pod ran", WAIT) == "Succeeded", kubelet.log()
        output = await _container_output(kubelet)
        seen = _seen(kubelet, output)
        assert "EXAMPLE_GPU_0=GPU-" in output or "EXAMPLE_GPU_1=GPU-" in output, seen
        assert "/dev/example-gpu" in output, seen
        # The pod has run: the kubelet unprepares its claim by itself.
        await eventually(
            lambda: "unprepared" in driver.log(), "the kubelet's NodeUnprepareResources", WAIT
        )
        assert not list(kubelet.cdi_dir.glob("*.json"))

        def finalizer_removed() -> bool:
            # The answer follows the local teardown; the finalizer removal it owes comes after.
            claim = _claim(api)
            return claim is None or f"{DRIVER}/prepared" not in (
                claim["metadata"].get("finalizers") or []
            )

        await eventually(finalizer_removed, "the driver's finalizer removed", WAIT)
        api.delete("Pod", "gpu-user", namespace=NS)
        await eventually(lambda: _claim(api) is None, "the claim gone with its pod", WAIT)
    finally:
        await driver.terminate()


async def _container_output(kubelet: realkubelet.RealKubelet) -> str:
    """The container's log once it holds the last command's line, or as it is after
    ``LOG_WAIT``."""
    deadline = time.monotonic() + LOG_WAIT
    while True:
        output = kubelet.container_log(NS, "gpu-user", "c")
        if "/dev/example-gpu" in output or time.monotonic() > deadline:
            return output
        await asyncio.sleep(0.1)


def _seen(kubelet: realkubelet.RealKubelet, output: str) -> str:
    """The container's output and the pod's log files with their sizes (a missing
    folder and an empty file are different failures)."""
    files: list[str] = []
    for path in sorted(kubelet.pod_logs_dir.glob(f"{NS}_gpu-user_*/*/*")):
        with contextlib.suppress(OSError):
            files.append(f"{path} ({path.stat().st_size} bytes)")
    return f"{output!r}; its log files: {', '.join(files) or 'none'}"


def _claim(api: ClusterApi) -> dict[str, Any] | None:
    claims = [
        c
        for c in api.list("ResourceClaim", namespace=NS)
        if c["metadata"]["name"].startswith("gpu-user-")
    ]
    return claims[0] if claims else None


def _pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-user", "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [
                {
                    "name": "c",
                    "image": realkubelet.BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "env | grep EXAMPLE_GPU; ls /dev/example-gpu*"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
