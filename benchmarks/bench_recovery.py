"""Node-wide work over 100, 1,000 and 10,000 recorded claims.

Every claim is PrepareCompleted with its CDI spec in place and its device held by the
backend, so recovery has nothing to repair: ``restart`` measures the per-record cost of
proving that (goals: 10,000 claims in 0.5 s, linear from 1,000). ``reboot`` is the same
node after a reboot (new boot ID, empty CDI dir): every claim is revalidated and its
spec rewritten durably, and the records are stamped, a commit per chunk (goal: 1 s);
``restart stamped`` is a restart right after that reboot, every record carrying its
reboot stamp (the restart goal holds there too).
``stale pass`` is one stale-claim cleanup pass over them, every claim still current in
the API (served from memory; goal: 1 s); ``all stale`` is a pass that finds every claim
gone from the API and tears them all down. ``upgrade`` is the first start over an
older release's ``checkpoint.json``: its records are taken over into the record
database.
Run it as a script:

    .venv/bin/python benchmarks/bench_recovery.py [--sizes 100,1000,10000] [--repeat 3]

It prints a table; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import pstats
import tempfile
import time
import uuid
from pathlib import Path

from dralet.cdi import store as cdi_store
from dralet.checkpoint import codec, database
from dralet.checkpoint.allocated import AllocatedDevice
from dralet.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, DeviceRecord
from dralet.drivers.example import SimulatedGPUs
from dralet.node.claims import ClaimEngine
from dralet.node.settings import DriverSettings
from dralet.testing import MemoryDevices
from dralet.testing.claims import MemoryClaims, allocated_claim

DRIVER = "gpu.example.com"
NODE = "node-a"
BOOT_ID = "boot-1"
DEFAULT_SIZES = (100, 1_000, 10_000)
PROFILE_LINES = 25


def _spec(uid: str, device: str) -> dict[str, object]:
    return {
        "cdiVersion": "0.5.0",
        "kind": f"{DRIVER}/claim",
        "devices": [
            {
                "name": f"{uid}-{device}",
                "containerEdits": {
                    "env": [f"EXAMPLE_GPU={device}"],
                    "deviceNodes": [{"path": f"/dev/example-{device}", "hostPath": "/dev/null"}],
                },
            }
        ],
    }


def build_node(
    root: Path, claims: int, *, cdi_root: Path, legacy: bool = False
) -> tuple[DriverSettings, SimulatedGPUs]:
    """A node with ``claims`` prepared claims (spec files written directly, without fsync);
    with ``legacy`` the records are an older release's ``checkpoint.json``. The simulated
    GPUs keep their state on the same tmpfs as the CDI dir: their "hardware" is memory,
    and marking 10,000 devices held costs no fsync to the disk each."""
    root.mkdir(parents=True)
    (root / "boot_id").write_text(BOOT_ID + "\n")
    settings = DriverSettings(
        driver_name=DRIVER,
        node_name=NODE,
        plugin_dir=root / "plugin",
        registry_dir=root / "registry",
        cdi_dir=cdi_root / root.name,
        boot_id_path=root / "boot_id",
    )
    settings.plugin_dir.mkdir(parents=True)
    settings.cdi_dir.mkdir(parents=True)  # tmpfs, as /var/run/cdi is on real nodes
    specs = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
    records: dict[str, ClaimRecord] = {}
    in_use: dict[str, str] = {}
    for index in range(claims):
        uid = str(uuid.UUID(int=index + 1))
        device = f"gpu-{index}"
        spec = _spec(uid, device)
        path = specs.path_for(uid)
        path.write_text(json.dumps(spec))
        info = path.stat()
        records[uid] = ClaimRecord(
            uid=uid,
            namespace="default",
            name=f"claim-{index}",
            state=ClaimState.PREPARE_COMPLETED,
            devices=(
                DeviceRecord(
                    AllocatedDevice(request="gpu", pool=NODE, device=device),
                    request_names=("gpu",),
                    cdi_device_ids=(f"{DRIVER}/claim={uid}-{device}",),
                    state={"index": index},
                ),
            ),
            cdi_spec=spec,
            cdi_spec_stamp=(info.st_ino, info.st_size, info.st_mtime_ns),
            finalizer_added=True,
            boot_id=BOOT_ID,
            updated_at="2026-01-01T00:00:00Z",
        )
        in_use[device] = uid
    if legacy:
        checkpoint = Checkpoint(driver=DRIVER, boot_id=BOOT_ID, claims=records)
        settings.checkpoint_path.write_bytes(codec.encode(checkpoint))
    else:
        db = database.RecordDatabase(settings.store_path, driver=DRIVER)
        db.apply([database.Put(r) for r in records.values()])
        db.close()
    backend = SimulatedGPUs(state_dir=cdi_root / f"{root.name}-gpus", node_name=NODE, count=claims)
    for device, uid in in_use.items():
        backend.mark_in_use(device, uid)
    return settings, backend


async def time_recovery(settings: DriverSettings, backend: SimulatedGPUs) -> tuple[float, int]:
    """Seconds one fresh engine (a new process: nothing cached) takes to recover."""
    engine = ClaimEngine(settings, backend=backend, claims=None)
    started = time.perf_counter()
    report = await engine.recover()
    elapsed = time.perf_counter() - started
    await engine.store.close()
    return elapsed, len(report.actions)


async def time_stale_pass(settings: DriverSettings, backend: SimulatedGPUs) -> float:
    """One stale-claim cleanup pass; every recorded claim is still current."""
    claims = MemoryClaims()
    engine = ClaimEngine(settings, backend=backend, claims=claims)
    for uid, record in engine.known_claims().items():
        device = record.devices[0].device
        claims.add(allocated_claim(record.name, uid=uid, devices=[("gpu", device)]))
    started = time.perf_counter()
    cleaned = await engine.collect_stale(force=True)
    elapsed = time.perf_counter() - started
    assert cleaned == [], cleaned
    await engine.store.close()
    return elapsed


async def time_stale_cleanup(settings: DriverSettings, backend: SimulatedGPUs) -> float:
    """One stale-claim cleanup pass that finds every recorded claim gone from the API
    and tears them all down. The devices are ``MemoryDevices`` holding what the example
    GPUs hold: the example writes and fsyncs a file on each release, which is the
    example's cost, not dralet's."""
    devices = MemoryDevices(len(backend.in_use()))
    devices.held = dict(backend.in_use())
    engine = ClaimEngine(settings, backend=devices, claims=MemoryClaims())
    logging.getLogger("dralet.node.claims").setLevel(logging.ERROR)  # a line per claim
    started = time.perf_counter()
    cleaned = await engine.collect_stale(force=True)
    elapsed = time.perf_counter() - started
    assert cleaned
    assert not devices.held, "stale claims were left prepared"
    await engine.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    parser.add_argument("--profile", type=int, default=0, help="profile recovery of N claims")
    parser.add_argument("--reboot", action="store_true", help="profile it after a reboot")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="dralet-bench-") as tmp,
        tempfile.TemporaryDirectory(prefix="dralet-bench-cdi-", dir="/dev/shm") as cdi_tmp,
    ):
        cdi = Path(cdi_tmp)
        if args.profile:
            settings, backend = build_node(Path(tmp) / "profile", args.profile, cdi_root=cdi)
            if args.reboot:
                settings.boot_id_path.write_text("boot-2\n")
                for spec in settings.cdi_dir.iterdir():
                    spec.unlink()
            profiler = cProfile.Profile()
            profiler.enable()
            asyncio.run(time_recovery(settings, backend))
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(PROFILE_LINES)
            return
        print(
            f"{'claims':>8}  {'restart (best)':>15}  {'per claim':>10}  {'repairs':>7}"
            f"  {'reboot':>10}  {'restart stamped':>15}  {'stale pass':>10}"
            f"  {'upgrade':>10}  {'all stale':>10}"
        )
        for size in sizes:
            settings, backend = build_node(Path(tmp) / str(size), size, cdi_root=cdi)
            runs = [asyncio.run(time_recovery(settings, backend)) for _ in range(args.repeat)]
            best = min(seconds for seconds, _ in runs)
            repairs = max(actions for _, actions in runs)
            stale = asyncio.run(time_stale_pass(settings, backend))
            settings, backend = build_node(Path(tmp) / f"{size}-reboot", size, cdi_root=cdi)
            settings.boot_id_path.write_text("boot-2\n")
            for spec in settings.cdi_dir.iterdir():
                spec.unlink()
            reboot, _ = asyncio.run(time_recovery(settings, backend))
            stamped = min(
                asyncio.run(time_recovery(settings, backend))[0] for _ in range(args.repeat)
            )
            settings, backend = build_node(
                Path(tmp) / f"{size}-upgrade", size, cdi_root=cdi, legacy=True
            )
            upgrade, _ = asyncio.run(time_recovery(settings, backend))
            settings, backend = build_node(Path(tmp) / f"{size}-stale", size, cdi_root=cdi)
            cleanup = asyncio.run(time_stale_cleanup(settings, backend))
            print(
                f"{size:>8}  {best * 1000:>12.1f} ms  {best / size * 1e6:>7.1f} us  {repairs:>7}"
                f"  {reboot * 1000:>7.1f} ms  {stamped * 1000:>12.1f} ms  {stale * 1000:>7.1f} ms"
                f"  {upgrade * 1000:>7.1f} ms  {cleanup * 1000:>7.1f} ms"
            )


if __name__ == "__main__":
    main()
