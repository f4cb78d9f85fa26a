"""Claims allocated per second by the dry-run allocator (a script, not a test).

Workload: 1,000 nodes, each publishing one v1 ResourceSlice of 8 GPUs; 1,000
single-device claims with a simple class selector and request selector, allocated in
turn as ``dralet simulate`` does (first node in name order that fits). Rows compare the
CEL compile cache on and off and the per-device selector result memo on and off.

Run: .venv/bin/python benchmarks/bench_allocation.py [--claims N] [--nodes N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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

    def line(self) -> str:
        per_claim = self.seconds / self.claims * MICROSECONDS
        rate = self.claims / self.seconds
        return f"{self.label:<44} {self.claims:>7} {rate:>10,.0f} {per_claim:>12,.1f}"


def timed(label: str, claims: int, run: Callable[[], simulation.SimulationReport]) -> Row:
    start = time.perf_counter()
    report = run()
    seconds = time.perf_counter() - start
    allocated = sum(o.status == "allocated" for o in report.outcomes)
    if allocated != claims:
        raise SystemExit(f"{label}: only {allocated} of {claims} claims allocated")
    return Row(label, claims, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=DEFAULT_CLAIMS)
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    args = parser.parse_args()

    start = time.perf_counter()
    objects = [node_slice(n) for n in range(args.nodes)]
    objects += [DEVICE_CLASS] + [claim(i) for i in range(args.claims)]
    inputs = manifests.decode_objects(objects)
    decode_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for slice_ in inputs.slices:
        for device in slice_.devices:
            if device.view is not None:
                device.view.activation()
    convert_seconds = time.perf_counter() - start
    devices = args.nodes * DEVICES_PER_NODE

    def run(*, compile_cache: bool, result_memo: bool) -> simulation.SimulationReport:
        settings = simulation.SimulationSettings(
            allocator=allocator.AllocatorSettings(cache_selector_results=result_memo)
        )
        engine = cel.CelEngine(cache_compiled=compile_cache)
        return simulation.simulate(inputs, engine=engine, settings=settings)

    rows = [
        timed(
            "CEL cache, selector memo",
            args.claims,
            lambda: run(compile_cache=True, result_memo=True),
        ),
        timed(
            "CEL cache, no selector memo",
            args.claims,
            lambda: run(compile_cache=True, result_memo=False),
        ),
        timed(
            "no CEL cache, no selector memo",
            args.claims,
            lambda: run(compile_cache=False, result_memo=False),
        ),
    ]
    shape = f"{args.nodes} nodes x {DEVICES_PER_NODE} devices ({devices} devices)"
    print(f"{args.claims} claims over {shape}")
    print(f"decoding manifests and building device views: {decode_seconds:.2f} s")
    print(f"converting device views for the CEL runtime (once): {convert_seconds:.2f} s")
    print(f"{'variant':<44} {'claims':>7} {'claims/s':>10} {'us/claim':>12}")
    for row in rows:
        print(row.line())


if __name__ == "__main__":
    main()
