"""Prepare + unprepare of one claim over gRPC, against the fsync'd atomic-write floor.

Prints one table from one run, so the ratio is measured under the same conditions:

- floor: ``fsutil.atomic_write`` of a 2 KiB file (write, fsync, rename, fsync dir)
  in the same directory tree the driver uses;
- prepare / unprepare: one claim per call through the kubelet emulator, to the example
  driver running as a separate process, with the claim read from the API stand-in over
  HTTP (GET + finalizer PATCH on prepare, finalizer PATCH on unprepare).

Usage: python benchmarks/bench_prepare.py [--claims 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from dralet import fsutil
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletEmulator

FLOOR_WRITES = 500
PAYLOAD = b"x" * 2048


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fsync_floor(directory: Path) -> list[float]:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "floor.json"
    samples = []
    for _ in range(FLOOR_WRITES):
        start = time.perf_counter()
        fsutil.atomic_write(target, PAYLOAD)
        samples.append(time.perf_counter() - start)
    return samples


async def prepare_cycle(root: Path, claims: int) -> tuple[list[float], list[float]]:
    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        paths = DriverPaths(root / "node")
        driver = DriverProcess(
            driver_args(paths, api_url=api.url, extra=["--no-publish", "--log-level", "warning"]),
            log_path=root / "driver.log",
        )
        kubelet = KubeletEmulator(paths.registry_dir)
        driver.start()
        try:
            plugin = await kubelet.wait_for_plugin("gpu.example.com")
            refs = [cluster.allocate_claim(f"bench-{i}", [("gpu", "gpu-0")]) for i in range(claims)]
            prepare, unprepare = [], []
            for ref in refs:
                start = time.perf_counter()
                result = await plugin.prepare([ref])
                prepare.append(time.perf_counter() - start)
                assert result.kubelet_error == "", result.kubelet_error
                start = time.perf_counter()
                done = await plugin.unprepare([ref])
                unprepare.append(time.perf_counter() - start)
                assert done.kubelet_error == "", done.kubelet_error
            return prepare, unprepare
        finally:
            await kubelet.close()
            await driver.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dralet-bench-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        floor = fsync_floor(root / "floor")
        prepare, unprepare = asyncio.run(prepare_cycle(root, args.claims))
    cycle = [p + u for p, u in zip(prepare, unprepare, strict=True)]
    floor_p50 = statistics.median(floor)
    rows = [
        ("atomic write (floor)", floor),
        ("prepare", prepare),
        ("unprepare", unprepare),
        ("prepare + unprepare", cycle),
    ]
    print(f"{'operation':24} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'p50 / floor':>12}")
    for name, samples in rows:
        p50 = statistics.median(samples)
        print(
            f"{name:24} {len(samples):5d} {p50 * 1e3:8.2f} {percentile(samples, 0.99) * 1e3:8.2f}"
            f" {p50 / floor_p50:12.1f}"
        )


if __name__ == "__main__":
    main()
