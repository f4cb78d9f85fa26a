"""Claims allocated per second by the dry-run allocator (a script, not a test).

Workload: 1,000 nodes, each publishing one v1 ResourceSlice of 8 GPUs; 1,000 claims
allocated in turn as ``dralet simulate`` does (first node in name order that fits).
Uniform claims all ask for one device with the same selectors; varied claims ask for
one or two devices with 32 different request selectors. Rows compare the CEL compile
cache and the selector result memo (keyed by device content) on and off, and the whole
``dralet simulate`` path from YAML text. Goals: 10,000 claims/s in the allocator and
2,000 claims/s end to end for uniform claims; varied claims within 3x of uniform.

Run: .venv/bin/python benchmarks/bench_allocation.py [--claims N] [--nodes N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dralet import yamltext
from dralet.allocation import allocator, cel, manifests, simulation

DRIVER = "gpu.example.com"
DEVICES_PER_NODE = 8
DEFAULT_NODES = 1_000
DEFAULT_CLAIMS = 1_000
CLASS_SELECTOR = f'device.driver == "{DRIVER}"'
REQUEST_SELECTOR = (
    f'device.attributes["{DRIVER}"].model == "A100" && '
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
)
MICROSECONDS = 1e6


def node_slice(node: int) -> dict[str, Any]:
    name = f"node-{node:04d}"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpu"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {"model": {"string": "A100"}, "index": {"int": index}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for index in range(DEVICES_PER_NODE)
            ],
        },
    }


def varied_selector(index: int) -> str:
    memory = (index % 4) * 20
    return (
        f'device.attributes["{DRIVER}"].index != {index % 8} && '
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{memory}Gi")) >= 0'
    )


def varied_claim(index: int) -> dict[str, Any]:
    obj = claim(index)
    exactly = obj["spec"]["devices"]["requests"][0]["exactly"]
    exactly["selectors"] = [{"cel": {"expression": varied_selector(index % 32)}}]
    exactly["count"] = 1 + index % 2
    return obj


def claim(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{index:04d}", "namespace": "bench"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu",
                            "selectors": [{"cel": {"expression": REQUEST_SELECTOR}}],
                        },
                    }
                ]
            }
        },
    }


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu"},
    "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]},
}


@dataclass(frozen=True)
class Row:
    label: str
    claims: int
    seconds: float
    cpu_seconds: float

    def line(self) -> str:
        per_claim = self.seconds / self.claims * MICROSECONDS
        rate = self.claims / self.seconds
        cpu_rate = self.claims / self.cpu_seconds
        return (
            f"{self.label:<44} {self.claims:>7} {rate:>10,.0f} {cpu_rate:>12,.0f} "
            f"{per_claim:>10,.1f}"
        )


def timed(label: str, claims: int, run: Callable[[], simulation.SimulationReport]) -> Row:
    start = time.perf_counter()
    cpu_start = time.process_time()
    report = run()
    cpu_seconds = time.process_time() - cpu_start
    seconds = time.perf_counter() - start
    allocated = sum(o.status == "allocated" for o in report.outcomes)
    if allocated != claims:
        raise SystemExit(f"{label}: only {allocated} of {claims} claims allocated")
    return Row(label, claims, seconds, cpu_seconds)


GOAL_ALLOCATOR = 10_000
GOAL_END_TO_END = 2_000
GOAL_VARIED_FACTOR = 3


def _yaml_text(objects: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False)


def end_to_end(text: str) -> simulation.SimulationReport:
    """What ``dralet simulate FILE`` does after reading the file."""
    inputs = manifests.decode_objects(yamltext.load_all(text))
    return simulation.simulate(inputs)


def end_to_end_pyyaml(text: str) -> simulation.SimulationReport:
    """The same with PyYAML's C loader alone (the reader before ``dralet.yamltext``)."""
    import yaml

    inputs = manifests.decode_objects(list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
    return simulation.simulate(inputs)


def end_to_end_json(text: str) -> simulation.SimulationReport:
    """What ``dralet simulate FILE.json`` does (a ``kubectl get -o json`` List)."""
    inputs = manifests.decode_objects([json.loads(text)])
    return simulation.simulate(inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=DEFAULT_CLAIMS)
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    args = parser.parse_args()

    start = time.perf_counter()
    base = [node_slice(n) for n in range(args.nodes)] + [DEVICE_CLASS]
    uniform = manifests.decode_objects(base + [claim(i) for i in range(args.claims)])
    varied = manifests.decode_objects(base + [varied_claim(i) for i in range(args.claims)])
    decode_seconds = time.perf_counter() - start
    devices = args.nodes * DEVICES_PER_NODE

    def run(
        inputs: manifests.Inputs, *, compile_cache: bool = True, result_memo: bool = True
    ) -> simulation.SimulationReport:
        settings = simulation.SimulationSettings(
            allocator=allocator.AllocatorSettings(cache_selector_results=result_memo)
        )
        engine = cel.CelEngine(cache_compiled=compile_cache)
        return simulation.simulate(inputs, engine=engine, settings=settings)

    uniform_text = _yaml_text(base + [claim(i) for i in range(args.claims)])
    varied_text = _yaml_text(base + [varied_claim(i) for i in range(args.claims)])
    uniform_json = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": base + [claim(i) for i in range(args.claims)]}
    )
    n = args.claims
    rows = [
        timed("allocator, uniform", n, lambda: run(uniform)),
        timed("allocator, varied", n, lambda: run(varied)),
        timed("allocator, uniform, no selector memo", n, lambda: run(uniform, result_memo=False)),
        timed(
            "allocator, uniform, no CEL cache, no memo",
            n,
            lambda: run(uniform, compile_cache=False, result_memo=False),
        ),
        timed("end to end from YAML, uniform", n, lambda: end_to_end(uniform_text)),
        timed("end to end from YAML, varied", n, lambda: end_to_end(varied_text)),
        timed("end to end from YAML, PyYAML only", n, lambda: end_to_end_pyyaml(uniform_text)),
        timed("end to end from JSON, uniform", n, lambda: end_to_end_json(uniform_json)),
    ]
    shape = f"{args.nodes} nodes x {DEVICES_PER_NODE} devices ({devices} devices)"
    print(f"{args.claims} claims over {shape}")
    print(f"decoding manifests and building device views (both sets): {decode_seconds:.2f} s")
    print("claims/s is per wall second; per CPU s discounts a busy machine's wait for a CPU")
    print(f"{'variant':<44} {'claims':>7} {'claims/s':>10} {'per CPU s':>12} {'us/claim':>10}")
    for row in rows:
        print(row.line())
    rate = {row.label: row.claims / min(row.seconds, row.cpu_seconds) for row in rows}
    checks = [
        ("allocator, uniform", rate["allocator, uniform"] >= GOAL_ALLOCATOR, GOAL_ALLOCATOR),
        (
            "end to end, uniform",
            rate["end to end from YAML, uniform"] >= GOAL_END_TO_END,
            GOAL_END_TO_END,
        ),
    ]
    for label, met, goal in checks:
        print(f"goal {label} >= {goal:,} claims/CPU s: {'met' if met else 'NOT met'}")
    factor = rate["allocator, uniform"] / rate["allocator, varied"]
    verdict = "met" if factor <= GOAL_VARIED_FACTOR else "NOT met"
    print(f"goal varied within {GOAL_VARIED_FACTOR}x of uniform: {factor:.1f}x, {verdict}")


if __name__ == "__main__":
    main()
