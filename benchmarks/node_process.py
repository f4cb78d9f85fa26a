"""A driver process for the benchmarks: claims served from memory, devices in memory.

The claim engine, its store, the CDI writes and the gRPC server are the real ones; the
API server and the hardware are left out (what dralet owns is what is measured; the API
round trips are measured beside it in ``bench_store``). ``--backend example`` uses the
example GPUs instead, whose own state file is rewritten on every prepare and release.
Claim ``i`` is ``default/c<i>`` with UID ``UUID(int=i + 1)``, allocated device
``gpu-<i mod devices>``. It stops on SIGTERM. The memory backend counts, in
``ROOT/violations``, every time it is asked to prepare a device another claim holds: the
engine must never let that reach the hardware.

    python benchmarks/node_process.py ROOT --claims N --devices D [--cdi-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid
from pathlib import Path

import dralet
from dralet.drivers.example import SimulatedGPUs
from dralet.node.backend import DeviceBackend
from dralet.node.settings import DriverSettings
from dralet.testing import MemoryDevices
from dralet.testing.claims import DRIVER, NODE, MemoryClaims, allocated_claim


class CountingDevices(MemoryDevices):
    """``MemoryDevices`` that also write each refusal to a file the benchmark reads."""

    def __init__(self, count: int, violations: Path) -> None:
        super().__init__(count)
        self.violations = violations

    async def prepare(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice
    ) -> dralet.PreparedDevice:
        try:
            return await super().prepare(claim, device)
        except dralet.ClaimError:
            with self.violations.open("a") as out:
                out.write(self.refused[-1] + "\n")
            raise


def claim_uid(index: int) -> str:
    return str(uuid.UUID(int=index + 1))


async def serve(args: argparse.Namespace) -> None:
    root = Path(args.root)
    (root / "boot_id").write_text("boot-1\n")
    settings = DriverSettings(
        driver_name=DRIVER,
        node_name=NODE,
        plugin_dir=root / "plugin",
        registry_dir=root / "registry",
        cdi_dir=Path(args.cdi_dir) if args.cdi_dir else root / "cdi",
        boot_id_path=root / "boot_id",
        stale_claim_interval=3600.0,
        metrics_port=args.metrics_port or None,
        metrics_host="127.0.0.1",
    )
    claims = MemoryClaims()
    for i in range(args.claims):
        claims.add(
            allocated_claim(f"c{i}", uid=claim_uid(i), devices=[("gpu", f"gpu-{i % args.devices}")])
        )
    backend: DeviceBackend = (
        SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=args.devices)
        if args.backend == "example"
        else CountingDevices(args.devices, root / "violations")
    )
    settings_all = dralet.Settings(
        driver=settings, api=dralet.ApiSettings(standalone=True), publish=False
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with dralet.Driver(backend, settings_all, claims=claims):
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--cdi-dir", default="")
    parser.add_argument("--backend", choices=("memory", "example"), default="memory")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--profile", default="", help="write a cProfile dump here at exit")
    args = parser.parse_args()
    if not args.profile:
        asyncio.run(serve(args))
        return
    import cProfile

    profiler = cProfile.Profile()
    try:
        profiler.runcall(asyncio.run, serve(args))
    finally:
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
