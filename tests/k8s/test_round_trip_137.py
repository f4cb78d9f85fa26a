"""The 1.37 round trip on the real control plane, with the example driver as ``dralet
run``: it publishes GPUs whole and as partitions over a counter set each, one GPU shared
by capacity, and an unhealthy GPU tainted; ``dralet simulate`` over what the API server
stored allocates partitions without over-using a counter and keeps off the taint unless
a request tolerates it; then kube-scheduler allocates a share of the shared GPU and the
kubelet emulator (1.37, DRA gRPC v1) prepares it, the share's ``shareID`` and consumed
memory reaching the backend."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet.cdi.store import SpecStore
from dralet.kubelet.services import V1
from tests.k8s.drivernode import DRIVER, NODE, Node, eventually
from tests.k8s.test_end_to_end import NS, delete_pod, pod, run_pod
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, K8S_TIMEOUT]

UNHEALTHY = f"{DRIVER}/unhealthy"
PARTITION = f'"partition" in device.attributes["{DRIVER}"]'


def claim(name: str, *selectors: str, tolerate: bool = False, memory: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": DRIVER,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }
    if tolerate:
        exactly["tolerations"] = [{"key": UNHEALTHY, "operator": "Exists"}]
    if memory:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


async def test_published_partitions_simulate_and_a_share_prepares_through_v1(
    node: Node, tmp_path: Path
) -> None:
    # 4 GPUs: gpu-0..2 also as two 40Gi halves each, gpu-3 shared; gpu-1 unhealthy.
    (node.paths.state_dir / "health.json").write_text(json.dumps({"gpu-1": "XID 79"}))
    await node.restart_driver("--driver-option", "partitions=2", "--driver-option", "shared=1")

    def published() -> list[dict[str, Any]] | None:
        slices = node.api.list("ResourceSlice", field_selector=f"spec.nodeName={NODE}")
        devices = [d for s in slices for d in s["spec"].get("devices") or []]
        tainted = [d["name"] for d in devices if d.get("taints")]
        counters = [c for s in slices for c in s["spec"].get("sharedCounters") or []]
        ready = len(devices) == 10 and len(counters) == 3 and len(tainted) == 3
        return slices if ready else None

    slices = await eventually(published, "partitions, counter sets and the health taint")
    by_name = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
    assert by_name["gpu-3"]["allowMultipleAllocations"] is True
    assert [t["key"] for t in by_name["gpu-1-part-0"]["taints"]] == [UNHEALTHY]

    wanted = [
        *(claim(f"a-part-{i}", PARTITION) for i in range(5)),
        claim("b-part-tolerating", PARTITION, tolerate=True),
        claim("c-whole", f"!({PARTITION})", f'device.attributes["{DRIVER}"].index < 3'),
    ]
    claims_file = tmp_path / "claims.yaml"
    claims_file.write_text(yaml.safe_dump_all(wanted))
    kubeconfig = node.api.write_kubeconfig(tmp_path / "admin.kubeconfig")
    out = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-m", "dralet.cli.main", "simulate"),
            *("--kubeconfig", str(kubeconfig), "-o", "json", str(claims_file)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    report = json.loads(out.stdout)
    got = {
        c["name"]: [r["device"] for r in c["allocation"]["devices"]["results"]]
        if c.get("allocation")
        else c["status"]
        for c in report["claims"]
        if c["name"][0] in "abc"
    }
    assert got == {
        "a-part-0": ["gpu-0-part-0"],
        "a-part-1": ["gpu-0-part-1"],
        "a-part-2": ["gpu-2-part-0"],
        "a-part-3": ["gpu-2-part-1"],
        "a-part-4": "unschedulable",  # only gpu-1's halves are left, tainted
        "b-part-tolerating": ["gpu-1-part-0"],
        "c-whole": "unschedulable",  # the halves hold gpu-0's and gpu-2's counters
    }, out.stderr

    assert node.plugin.service == V1
    node.api.create(claim("share", f'device.attributes["{DRIVER}"].index == 3', memory="20Gi"))
    node.api.create(pod("share-pod", {"resourceClaimName": "share"}))
    ref, allocated = await run_pod(node, "share-pod")
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-3"
    assert result["consumedCapacity"] == {"memory": "20Gi"}
    share_id = result["shareID"]
    specs = SpecStore(node.paths.cdi_dir, f"{DRIVER}/claim")
    (device,) = (specs.read(ref.uid) or {})["devices"]
    env = device["containerEdits"]["env"]
    assert f"EXAMPLE_GPU_3_SHARE={share_id}" in env
    assert "EXAMPLE_GPU_3_MEMORY=20Gi" in env
    await delete_pod(node, "share-pod", ref)
