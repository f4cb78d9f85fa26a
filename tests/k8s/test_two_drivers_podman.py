"""Two drivers side by side on one node of real Kubernetes (each release CI builds), and a real
container: a pod asks for a simulated GPU (the example driver) and a device node (hostdev)
through two ResourceClaimTemplates; the controller-manager makes the claims, the scheduler
allocates both and binds the pod, the kubelet emulator prepares each claim through its own
driver, and podman starts the container with both claims' CDI devices. Deleting the pod
unprepares both, the finalizers go, and the claims are deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletClaim
from tests.harness import podman
from tests.hostdev.fakehost import FakeHost
from tests.k8s.drivernode import DRIVER, NODE, Node, eventually
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.every_k8s_release,
    pytest.mark.e2e,
    pytest.mark.runtime,
    K8S_TIMEOUT,
]

AVAILABLE = podman.available()
HOSTDEV = "hostdev.example.com"
NS = "default"


def _template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "d", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


@pytest.mark.skipif(not AVAILABLE, reason=f"no container runtime: {AVAILABLE.reason}")
async def test_a_pod_with_devices_of_two_drivers_runs_in_podman(
    node: Node, tmp_path: Path, short_tmp: Path
) -> None:
    api = node.api
    host = FakeHost(tmp_path / "host")
    host.node("tty0", (1, 5))  # /dev/zero's numbers: the container can read from it
    config = tmp_path / "hostdev.yaml"
    config.write_text(
        host.config(
            f"  - name: tty\n    match: {{paths: ['{host.dev}/tty*']}}\n    naming: [path]\n"
            "    containerPath: /dev/hostdev-tty\n    env: {HOSTDEV_TTY: '1'}\n"
        )
    )
    hostdev_paths = DriverPaths(short_tmp / "hd", driver_name=HOSTDEV, node_name=NODE)
    shared = [
        "--registry-dir", str(node.paths.registry_dir),
        "--cdi-dir", str(node.paths.cdi_dir),
        "--kubeconfig", str(api.driver_kubeconfig()),
    ]  # fmt: skip
    hostdev = DriverProcess(
        driver_args(
            hostdev_paths, api_url=None, driver="hostdev", driver_config=config, extra=shared
        ),
        log_path=tmp_path / "hostdev.log",
    )
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": HOSTDEV},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{HOSTDEV}"'}}]},
        }
    )
    hostdev.start()
    try:
        hostdev_plugin = await node.kubelet.wait_for_plugin(HOSTDEV)
        await eventually(
            lambda: [
                s
                for s in api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}")
                if s["spec"]["driver"] == HOSTDEV
            ],
            "hostdev's ResourceSlice",
        )
        api.create(_template("gpu", DRIVER))
        api.create(_template("tty", HOSTDEV))
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "both", "namespace": NS},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"claims": [{"name": "gpu"}, {"name": "tty"}]},
                        }
                    ],
                    "resourceClaims": [
                        {"name": "gpu", "resourceClaimTemplateName": "gpu"},
                        {"name": "tty", "resourceClaimTemplateName": "tty"},
                    ],
                },
            }
        )

        def claims() -> dict[str, dict[str, Any]] | None:
            pod = api.get("Pod", "both", namespace=NS) or {}
            statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
            if pod.get("spec", {}).get("nodeName") != NODE or len(statuses) != 2:
                return None
            found = {
                s["name"]: api.get("ResourceClaim", s["resourceClaimName"], namespace=NS)
                for s in statuses
            }
            if not all(c and c.get("status", {}).get("allocation") for c in found.values()):
                return None
            return {k: v for k, v in found.items() if v}

        allocated = await eventually(claims, "pod bound with both claims allocated")
        refs = {
            name: KubeletClaim(NS, c["metadata"]["uid"], c["metadata"]["name"])
            for name, c in allocated.items()
        }
        gpu = await node.plugin.prepare([refs["gpu"]])
        tty = await hostdev_plugin.prepare([refs["tty"]])
        assert gpu.kubelet_error == "" and tty.kubelet_error == "", hostdev.log()
        ids = gpu.cdi_ids(refs["gpu"].uid) + tty.cdi_ids(refs["tty"].uid)
        assert {i.split("/")[0] for i in ids} == {DRIVER, HOSTDEV}

        run = await asyncio.to_thread(
            podman.run_container,
            node.paths.cdi_dir,
            ids,
            command=["sh", "-c", "head -c 4 /dev/hostdev-tty | od -An -tx1"],
        )
        assert run.ok, (run.exit_code, run.stderr, run.cdi_error)
        assert run.stdout.split() == ["00", "00", "00", "00"], run.stdout
        assert run.env.get("HOSTDEV_TTY") == "1"
        assert any(k.startswith("EXAMPLE_GPU_") for k in run.env), run.env
        assert any(p.startswith("/dev/example-gpu") for p in run.device_nodes())

        api.delete("Pod", "both", namespace=NS)
        assert (await node.plugin.unprepare([refs["gpu"]])).kubelet_error == ""
        assert (await hostdev_plugin.unprepare([refs["tty"]])).kubelet_error == ""
        api.request(
            "DELETE", api.path("Pod", name="both", namespace=NS), query={"gracePeriodSeconds": "0"}
        )
        for ref in refs.values():

            def deleted(name: str = ref.name) -> bool:
                return api.get("ResourceClaim", name, namespace=NS) is None

            await eventually(deleted, f"claim {ref.name} deleted with its pod")
        assert not list(node.paths.cdi_dir.glob("*.json"))
    finally:
        await hostdev.terminate()
