"""``dralet simulate`` invoked as a command on fixture manifests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from dralet.cli import main

FIXTURES = Path(__file__).parent / "simulate_fixtures"
SLICES = str(FIXTURES / "slices.yaml")
CLASSES = str(FIXTURES / "classes.yaml")
CLAIMS = str(FIXTURES / "claims.yaml")
UNSCHEDULABLE = str(FIXTURES / "unschedulable.yaml")
MAX_COLUMNS = 100
TYPO = 'device.attributes["gpu.example.com"].modle == "A100"'


def simulate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main.cli, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_output_in_status_allocation_shape() -> None:
    code, out, _ = simulate(
        "--slices", SLICES, "--classes", CLASSES, "--claims", CLAIMS, "-o", "json"
    )
    assert code == 0
    document = json.loads(out)
    assert document["allAllocated"] is True
    assert "random order" in document["searchOrder"]
    big, pair = document["claims"]
    assert (big["namespace"], big["name"], big["status"], big["node"]) == (
        "team-a",
        "big-memory",
        "allocated",
        "node-a",
    )
    assert big["allocation"] == {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-1"}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
            ]
        },
    }
    # node-a's gpu-0 is numa 0 and gpu-1 (numa 1) is taken: the pair lands on node-b.
    assert pair["node"] == "node-b"
    assert [r["device"] for r in pair["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]


def test_unallocated_claim_exits_1_and_explains() -> None:
    code, out, _ = simulate(SLICES, CLASSES, CLAIMS, UNSCHEDULABLE, "--explain")
    assert code == 1
    assert "team-b/three-a100: unschedulable (2 nodes tried, none fits)" in out
    assert "gpus: gpu.example.com/node-a/gpu-1: in use: allocated to claim team-a/big-memory" in out
    assert "note: every device visible from this node is in use" in out
    assert all(len(line) <= MAX_COLUMNS for line in out.splitlines())


def test_explain_names_the_first_false_clause() -> None:
    code, out, _ = simulate(SLICES, CLASSES, CLAIMS, "--node", "node-a", "--explain", "-o", "json")
    assert code == 1
    big = json.loads(out)["claims"][0]
    assert big["explain"][0]["rejected"] == [
        {
            "request": "gpu",
            "device": "gpu.example.com/node-a/gpu-0",
            "reason": "claim team-a/big-memory: selector #0 is false: "
            'device.capacity["gpu.example.com"].memory.compareTo(quantity("64Gi")) >= 0',
        }
    ]


def test_directory_with_every_kind_and_yaml_output() -> None:
    code, out, _ = simulate(str(FIXTURES / "cluster"), "-o", "yaml")
    assert code == 0
    document = yaml.safe_load(out)
    (fpga,) = document["claims"]
    assert fpga["node"] == "worker-2"
    assert fpga["allocation"]["devices"]["results"] == [
        {
            "request": "accel/any",
            "driver": "fpga.example.com",
            "pool": "rack-r2",
            "device": "fpga-0",
        }
    ]
    assert fpga["allocation"]["devices"]["config"] == [
        {
            "source": "FromClass",
            "requests": ["accel/any"],
            "opaque": {"driver": "fpga.example.com", "parameters": {"bitstream": "default"}},
        }
    ]
    assert fpga["allocation"]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}
        ]
    }
    assert document["ignored"] == ["ConfigMap unrelated"]


def test_table_output() -> None:
    code, out, _ = simulate(SLICES, CLASSES, CLAIMS)
    assert code == 0
    assert out.splitlines()[:3] == [
        "team-a/big-memory: allocated on node node-a",
        "  REQUEST  DRIVER           POOL    DEVICE",
        "  gpu      gpu.example.com  node-a  gpu-1",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [str(FIXTURES / "bad.yaml"), CLASSES],
            "error: ResourceClaim team-c/wrong-mode: spec.devices.requests[0].allocationMode: "
            'Unsupported value: "WaitForFirstConsumer": supported values: "All", "ExactCount"',
        ),
        (
            [SLICES, CLASSES],
            "error: no ResourceClaim, ResourceClaimTemplate or Pod using claims in the input",
        ),
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    code, _, err = simulate(*args)
    assert code == 2
    assert err.strip() == message


def test_unparseable_yaml_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    code, _, err = simulate(str(broken))
    assert code == 2
    assert err.startswith(f"error: {broken}:")


def test_cel_runtime_error_is_reported_per_claim(tmp_path: Path) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "typo", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [{"cel": {"expression": TYPO}}],
                        },
                    }
                ]
            }
        },
    }
    path = tmp_path / "claim.json"
    path.write_text(json.dumps(claim))
    code, out, _ = simulate(SLICES, CLASSES, str(path), "-o", "json")
    assert code == 1
    (typo,) = json.loads(out)["claims"]
    assert (typo["status"], typo["error"]) == (
        "error",
        "claim default/typo: selector #0: CEL runtime error: no such key: modle",
    )


def test_subprocess_entry_point() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dralet.cli.main",
            "simulate",
            SLICES,
            CLASSES,
            CLAIMS,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["allAllocated"] is True


PODS = str(FIXTURES / "pods.yaml")


def test_a_pods_claims_are_allocated_together_and_replicas_get_their_own_claims() -> None:
    code, out, _ = simulate(PODS, "-o", "json")
    assert code == 0
    document = json.loads(out)
    pods = {p["name"]: p for p in document["pods"]}
    assert pods["train"]["status"] == "scheduled"
    assert pods["train"]["node"] == "node-a"
    assert pods["train"]["claims"] == ["ml/small", "ml/large"]
    assert pods["serve-0"]["from"] == "Deployment/serve"
    claims = {c["name"]: c for c in document["claims"]}
    picked = {
        name: claims[name]["allocation"]["devices"]["results"][0]["device"]
        for name in ("small", "large")
    }
    assert picked == {"small": "gpu-small", "large": "gpu-large"}
    # The replicas take what is left: node-a is full, so both land on node-b.
    assert {claims[f"serve-{i}-gpu"]["node"] for i in (0, 1)} == {"node-b"}
    assert "one-gpu" not in claims


def test_a_pod_that_cannot_fit_all_its_claims_on_one_node_is_unschedulable() -> None:
    code, out, _ = simulate(PODS, "--node-name", "node-b", "-o", "table")
    assert code == 1
    lines = out.splitlines()
    assert "pod ml/train: scheduled on node node-b" in lines
    assert any(
        line.startswith("pod ml/serve-1 [Deployment/serve]: unschedulable") for line in lines
    )


def test_node_is_an_alias_of_node_name() -> None:
    assert (
        simulate(PODS, "--node", "node-a", "-o", "json")[1]
        == simulate(PODS, "--node-name", "node-a", "-o", "json")[1]
    )


PARTITIONED = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: counters}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 2}
  sharedCounters:
  - name: gpu-0
    counters: {memory: {value: 8Gi}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: devices}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 2}
  devices:
  - name: whole
    consumesCounters: [{counterSet: gpu-0, counters: {memory: {value: 8Gi}}}]
  - name: tainted
    taints: [{key: example.com/broken, effect: NoSchedule}]
  - name: shared
    allowMultipleAllocations: true
    capacity:
      memory:
        value: 8Gi
        requestPolicy: {default: 1Gi, validRange: {min: 1Gi, step: 1Gi}}
  - name: fabric
    bindingConditions: [example.com/Attached]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - name: whole
      exactly: {deviceClassName: gpu}
    - name: part
      exactly: {deviceClassName: gpu, capacity: {requests: {memory: 3Gi}}}
    - name: attached
      exactly: {deviceClassName: gpu, count: 2}
"""


@pytest.mark.parametrize(
    ("release", "devices"),
    [("1.37", ["whole", "shared", "shared", "fabric"]), ("1.35", None)],
)
def test_partitions_taints_shares_and_binding_per_release(
    tmp_path: Path, release: str, devices: list[str] | None
) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(PARTITIONED)
    _, out, _ = simulate("-k", release, "-o", "json", str(path))
    (claim,) = json.loads(out)["claims"]
    got = claim.get("allocation", {}).get("devices", {}).get("results")
    assert ([r["device"] for r in got] if got else None) == devices
    if devices is not None:
        share = got[1]
        assert share["consumedCapacity"] == {"memory": str(3 * 2**30)} and share["shareID"]
        assert got[3]["bindingConditions"] == ["example.com/Attached"]
        table = simulate("-k", release, str(path))[1]
        assert "shared: a share (memory 3221225472)" in table
        assert "waits for binding conditions example.com/Attached" in table


SHARED_GPU = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: shared}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: shared
    allowMultipleAllocations: true
    capacity:
      memory: {value: 8Gi}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - name: part
      exactly: {deviceClassName: gpu, capacity: {requests: {REQUESTS}}}
"""


def _claim_result(tmp_path: Path, text: str, *args: str) -> dict[str, Any]:
    path = tmp_path / "state.yaml"
    path.write_text(text)
    code, out, err = simulate(*args, "-o", "json", str(path))
    assert code in (0, 1), err
    (claim,) = json.loads(out)["claims"]
    return dict(claim)


@pytest.mark.parametrize("name", ["memory", "gpu.example.com/memory"])
def test_from_1_38_a_capacity_request_may_name_the_capacity_with_the_drivers_domain(
    tmp_path: Path, name: str
) -> None:
    text = SHARED_GPU.replace("REQUESTS", f"{name}: 3Gi")
    claim = _claim_result(tmp_path, text, "-k", "1.38")
    assert claim["status"] == "allocated"
    (result,) = claim["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"memory": str(3 * 2**30)}  # as the slice spells it
    before = _claim_result(tmp_path, text, "-k", "1.37", "--explain")
    assert before["status"] == ("allocated" if name == "memory" else "unschedulable")


def test_a_capacity_requested_both_short_and_qualified_does_not_fit(tmp_path: Path) -> None:
    text = SHARED_GPU.replace("REQUESTS", "memory: 1Gi, gpu.example.com/memory: 2Gi")
    claim = _claim_result(tmp_path, text, "-k", "1.38", "--explain")
    assert claim["status"] == "unschedulable"
    (node,) = claim["explain"]
    (rejection,) = node["rejected"]
    assert "requested both as memory and as gpu.example.com/memory" in rejection["reason"]


@pytest.mark.parametrize(
    ("fixture", "status"),
    [
        ("taint-rule-without-selector.yaml", "allocated"),
        ("taint-rule-empty-selector.yaml", "unschedulable"),
    ],
)
def test_at_1_38_a_taint_rule_without_selector_taints_nothing_and_an_empty_one_everything(
    tmp_path: Path, fixture: str, status: str
) -> None:
    text = (FIXTURES / fixture).read_text()
    assert _claim_result(tmp_path, text, "-k", "1.38")["status"] == status


def test_the_qualified_capacity_name_fixture_fits_from_1_38_only(tmp_path: Path) -> None:
    text = (FIXTURES / "k138-capacity-qualified-name.yaml").read_text()
    assert _claim_result(tmp_path, text, "-k", "1.38")["status"] == "allocated"
    assert _claim_result(tmp_path, text, "-k", "1.37")["status"] == "unschedulable"


def test_1_38_locks_the_ga_dra_gates(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(SHARED_GPU.replace("REQUESTS", "memory: 1Gi"))
    gate = ("--feature-gate", "DRADeviceTaints=false")
    code, _, err = simulate("-k", "1.38", *gate, str(path))
    assert code == 2
    assert "DRADeviceTaints is locked to true" in err
    assert simulate("-k", "1.37", *gate, str(path))[0] == 0
    assert simulate("-k", "1.38", "--feature-gate", "DRAConsumableCapacity=false", str(path))[
        0
    ] in (0, 1)


def test_1_38_is_the_default_release() -> None:
    code, out, _ = simulate("--help")
    assert code == 0
    assert "[default: 1.38]" in out


ALLOCATED_ON_TAINTED = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    taints: [{key: example.com/broken, effect: NoExecute}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu}
status:
  allocation:
    devices:
      results:
      - request: gpu
        driver: gpu.example.com
        pool: node-a
        device: gpu-0
        tolerations: [TOLERATION]
"""


@pytest.mark.parametrize(
    ("toleration", "evicted_at"),
    [
        ("{operator: Exists}", {"1.37": True, "1.38": False}),
        ("{operator: Exists, effect: NoExecute}", {"1.37": False, "1.38": False}),
        ("{operator: Exists, effect: NoSchedule}", {"1.37": True, "1.38": True}),
        ("{key: other, operator: Exists}", {"1.37": True, "1.38": True}),
    ],
)
def test_an_empty_effect_toleration_protects_from_eviction_from_1_38(
    tmp_path: Path, toleration: str, evicted_at: dict[str, bool]
) -> None:
    text = ALLOCATED_ON_TAINTED.replace("TOLERATION", toleration)
    for release, evicted in evicted_at.items():
        claim = _claim_result(tmp_path, text, "-k", release)
        assert claim["status"] == "already-allocated"
        assert ("eviction" in claim) == evicted, release
        if evicted:
            assert "example.com/broken:NoExecute" in claim["eviction"]


def test_toleration_seconds_only_delay_the_eviction(tmp_path: Path) -> None:
    toleration = "{operator: Exists, effect: NoExecute, tolerationSeconds: 300}"
    text = ALLOCATED_ON_TAINTED.replace("TOLERATION", toleration)
    claim = _claim_result(tmp_path, text, "-k", "1.38")
    assert claim["eviction"].startswith("its pods are evicted after 300s: device ")
    path = tmp_path / "state.yaml"
    assert "eviction: its pods are evicted after 300s" in simulate("-k", "1.38", str(path))[1]


@pytest.mark.parametrize("value", ["null", "H100", "[H100]"])
def test_an_attribute_that_is_not_an_object_is_bad_input_not_a_crash(
    tmp_path: Path, value: str
) -> None:
    text = SHARED_GPU.replace("REQUESTS", "memory: 1Gi").replace(
        "    allowMultipleAllocations: true\n",
        f"    allowMultipleAllocations: true\n    attributes: {{model: {value}}}\n",
    )
    path = tmp_path / "state.yaml"
    path.write_text(text)
    code, _, err = simulate(str(path))
    assert code == 2
    assert err == (
        "error: ResourceSlice shared: devices[0].attributes[model]: must be an object with "
        "one value (int, bool, string or version)\n"
    )


def test_from_1_35_exact_count_skips_an_incomplete_pool(tmp_path: Path) -> None:
    """One of two slices published: 1.34 takes its device, 1.35 and later wait."""
    state = tmp_path / "incomplete.yaml"
    state.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": "gpu"},
                    "spec": {},
                },
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": "s"},
                    "spec": {
                        "driver": "gpu.example.com",
                        "nodeName": "node-a",
                        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
                        "devices": [{"name": "gpu-0"}],
                    },
                },
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": "c", "namespace": "default"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]
                        }
                    },
                },
            ]
        )
    )
    assert simulate("-k", "1.34", str(state))[0] == 0
    assert simulate("-k", "1.35", str(state))[0] == 1
    assert simulate("-k", "1.37", str(state))[0] == 1


TOLERATED_WITHOUT_EFFECT = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: gpu.example.com
  nodeName: node-a
  pool: {name: node-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    taints: [{key: example.com/broken, effect: NoExecute}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu
        tolerations: [{key: example.com/broken, operator: Exists}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers: [{name: c, image: registry.example.com/app:1}]
  resourceClaims: [{name: c, resourceClaimName: c}]
"""


def test_a_device_the_scheduler_gives_to_a_toleration_without_effect_is_evicted_before_1_38(
    tmp_path: Path,
) -> None:
    """The scheduler allocates the NoExecute-tainted device; the 1.37 eviction controller
    counts only NoExecute tolerations and evicts the pod right after binding."""
    path = tmp_path / "state.yaml"
    path.write_text(TOLERATED_WITHOUT_EFFECT)
    for release, evicted in (("1.37", True), ("1.38", False)):
        code, out, _ = simulate("-k", release, "-o", "json", str(path))
        document = json.loads(out)
        (pod,) = document["pods"]
        (claim,) = document["claims"]
        assert (code, pod["status"]) == (0, "scheduled"), release
        assert ("eviction" in claim) == evicted, release
    table = simulate("-k", "1.37", str(path))[1]
    assert "eviction: its pods are evicted: device gpu.example.com/node-a/gpu-0" in table
