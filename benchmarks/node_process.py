"""A driver process for the benchmarks: claims served from memory, devices in memory.

The claim engine, its store, the CDI writes and the gRPC server are the real ones; the
API server and the hardware are left out (what dralet owns is what is measured; the API
round trips are measured beside it in ``bench_store``). ``--backend example`` uses the
example GPUs instead, whose own state file is rewritten on every prepare and release.
Claim ``i`` is ``default/c<i>`` with UID ``UUID(int=i + 1)``, allocated device
``gpu-<i mod devices>``; claims are made when read and only their finalizers are kept, so
the process's memory is the driver's own, not the stand-in API's. It stops on SIGTERM.
The memory backend counts, in ``ROOT/violations``, every time it is asked to prepare a
device another claim holds: the engine must never let that reach the hardware.

    python benchmarks/node_process.py ROOT --claims N --devices D [--cdi-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dralet
from dralet.drivers.example import SimulatedGPUs
from dralet.node.settings import DriverSettings
from dralet.testing import MemoryDevices
from dralet.testing.claims import DRIVER, NODE, allocated_claim


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
    """``str(uuid.UUID(int=index + 1))``, formatted directly: this source stands in for
    the API server, and what it costs should not be counted as the driver's."""
    digits = f"{index + 1:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class SyntheticClaims:
    """A ``ClaimSource`` of ``count`` claims made on each read (as an API server hands
    out a fresh object), keeping nothing but the finalizers set on them."""

    def __init__(self, count: int, devices: int) -> None:
        self.count = count
        self.devices = devices
        self.finalizers: dict[str, list[str]] = {}

    def _index(self, namespace: str, name: str) -> int | None:
        if namespace != "default" or not name.startswith("c") or not name[1:].isdigit():
            return None
        index = int(name[1:])
        return index if index < self.count else None

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        index = self._index(namespace, name)
        if index is None:
            return None
        claim = allocated_claim(
            name, uid=claim_uid(index), devices=[("gpu", f"gpu-{index % self.devices}")]
        )
        claim["metadata"]["finalizers"] = list(self.finalizers.get(name, ()))
        return claim

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        index = self._index(namespace, name)
        if index is None or claim_uid(index) != uid:
            return False
        kept = self.finalizers.setdefault(name, [])
        if finalizer not in kept:
            kept.append(finalizer)
        return True

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        kept = self.finalizers.get(name)
        if kept is not None and finalizer in kept:
            kept.remove(finalizer)
            if not kept:
                del self.finalizers[name]
        return True


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
    claims = SyntheticClaims(args.claims, args.devices)
    backend: dralet.ClaimBackend = (
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
