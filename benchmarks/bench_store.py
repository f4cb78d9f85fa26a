"""The claim store under load: a real driver process over gRPC, each cost over its floor.

The driver runs as its own process (``node_process.py``: the real engine, store, CDI
writes and gRPC server; claims and devices in memory, so what is measured is what dralet
owns). Every ratio divides two figures measured in this one run:

- lifecycle with 1,000 claims recorded / with none (median prepare + unprepare of one
  claim per call);
- 1,000 claims in one NodePrepareResources (CDI dir on tmpfs as on real nodes: the
  median of three calls, the first shown beside; then once on the plugin dir's disk),
  and its per-claim cost over that of a 1-claim call;
- one claim's lifecycle over its floor: the store commits it needs (one SQLite commit
  in the same directory), its CDI spec written and removed (``fsutil.atomic_write`` +
  ``remove_file`` in the same CDI dir) and one gRPC round trip per call (an empty
  NodePrepareResources), each part sampled right after each lifecycle, so both see the
  machine alike (and again alone, one sample after another, shown beside); the API
  calls are measured against the API stand-in and shown beside, not added (the driver
  here reads claims from memory);
- 64 concurrent clients on overlapping claims for ``--duration`` seconds: p99 over the
  1-claim p50, the CPU the driver and the clients (this process) used meanwhile, and
  how often the hardware was asked for a device another claim holds; then the same
  clients for as long against a plugin that does nothing (``null_plugin.py``: grpcio's
  server answering at once), the floor of any Python gRPC driver under that load;
- fsyncs per lifecycle and per 1,000-claim call (the driver run under ``strace``);
- the driver's RSS idle and with 10,000 claims prepared (the benchmark driver: its claims
  are made when read, so the figure is the driver's own memory), and that of the real
  ``dralet run --driver example`` idle against the API stand-in, with the official
  Kubernetes client it talks to the API server through.

    .venv/bin/python benchmarks/bench_store.py [--duration 60] [--cycles 200]

It prints a table; it is not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dralet import fsutil
from dralet.apiserver import ApiServer
from dralet.checkpoint import database
from dralet.checkpoint.allocated import AllocatedDevice
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from dralet.cluster import ControlPlane
from dralet.cluster.process import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletClaim, KubeletEmulator, PluginConnection
from dralet.kubelet.services import DRA_PLUGIN_TYPE, V1
from dralet.protocol.proto import pluginregistration_v1_pb2

HERE = Path(__file__).resolve().parent
DRIVER = "gpu.example.com"
BATCH = 1_000
BATCH_REPEATS = 3
"""1,000-claim calls timed (prepare, then unprepare); the median counts, the first is shown."""
RSS_CLAIMS = 10_000
CONCURRENT_CLIENTS = 64
OVERLAP_POOL = 96
"""Claims the concurrent clients share; claims ``i`` and ``i + 48`` share a device."""
FLOOR_SAMPLES = 300
TMPFS = Path("/dev/shm")
SPEC = b'{"cdiVersion":"0.5.0","kind":"gpu.example.com/claim","devices":[]}' + b" " * 400


def claim(index: int) -> KubeletClaim:
    return KubeletClaim("default", str(uuid.UUID(int=index + 1)), f"c{index}")


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def traced_child(strace_pid: int) -> int:
    """The driver strace started (its one child)."""
    return int(Path(f"/proc/{strace_pid}/task/{strace_pid}/children").read_text().split()[0])


@dataclass
class Node:
    root: Path
    process: subprocess.Popen[bytes]
    plugin: PluginConnection
    kubelet: KubeletEmulator
    trace: Path | None = None

    def rss_mb(self) -> float:
        pid = self.process.pid
        if self.trace is not None:
            pid = traced_child(pid)
        return rss_mb(pid)

    def fsyncs(self) -> int:
        assert self.trace is not None
        text = self.trace.read_text() if self.trace.exists() else ""
        return sum(1 for line in text.splitlines() if "fsync(" in line or "fdatasync(" in line)

    def violations(self) -> int:
        path = self.root / "violations"
        return len(path.read_text().splitlines()) if path.exists() else 0


@contextlib.asynccontextmanager
async def node(
    root: Path, *, claims: int, devices: int, cdi_dir: Path | None = None, trace: bool = False
) -> AsyncIterator[Node]:
    root.mkdir(parents=True)  # noqa: ASYNC240
    command = [
        sys.executable,
        str(HERE / "node_process.py"),
        str(root),
        "--claims",
        str(claims),
        "--devices",
        str(devices),
    ]
    if cdi_dir is not None:
        command += ["--cdi-dir", str(cdi_dir)]
    trace_path = root / "strace.out" if trace else None
    if trace_path is not None:
        command = [
            "strace", "-f", "--seccomp-bpf", "-e", "trace=fsync,fdatasync",
            "-o", str(trace_path), *command,
        ]  # fmt: skip
    log = (root / "driver.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    kubelet = KubeletEmulator(root / "registry")
    try:
        plugin = await kubelet.wait_for_plugin(DRIVER, within=120)
        yield Node(root, process, plugin, kubelet, trace_path)
    finally:
        await kubelet.close()
        if trace_path is not None:  # strace does not pass SIGTERM on to the driver
            os.kill(traced_child(process.pid), signal.SIGTERM)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


async def cycles(plugin: PluginConnection, refs: Sequence[KubeletClaim]) -> list[float]:
    samples = []
    for ref in refs:
        start = time.perf_counter()
        assert (await plugin.prepare([ref])).kubelet_error == ""
        assert (await plugin.unprepare([ref])).kubelet_error == ""
        samples.append(time.perf_counter() - start)
    return samples


async def one_call(
    plugin: PluginConnection, refs: Sequence[KubeletClaim], *, prepare: bool
) -> float:
    start = time.perf_counter()
    result = await (plugin.prepare(refs) if prepare else plugin.unprepare(refs))
    elapsed = time.perf_counter() - start
    assert result.kubelet_error == "", result.kubelet_error[:500]
    return elapsed


LIFECYCLE_COMMITS = 4


@dataclass
class Floor:
    """One lifecycle's floor parts, each sampled right after a lifecycle (so both see the
    machine in the same state): one store commit of a small record in the plugin dir's
    file system, a spec-sized file written atomically and removed in the CDI dir, and
    one empty NodePrepareResources round trip."""

    commits: list[float] = field(default_factory=list)
    specs: list[float] = field(default_factory=list)
    rpcs: list[float] = field(default_factory=list)

    def medians(self) -> tuple[float, float, float]:
        """The median commit, spec write and removal, and round trip."""
        commit, spec, rpc = (statistics.median(x) for x in (self.commits, self.specs, self.rpcs))
        return commit, spec, rpc

    def total(self) -> float:
        """The commits of one lifecycle (prepare: intent, completion; unprepare:
        UnprepareStarted, the record's removal) + one spec write and removal + 2 round
        trips."""
        commit, spec, rpc = self.medians()
        return LIFECYCLE_COMMITS * commit + spec + 2 * rpc


async def sample_floor(
    plugin: PluginConnection, db: database.RecordDatabase, cdi_dir: Path, floor: Floor, i: int
) -> None:
    """One sample of each floor part."""
    rec = ClaimRecord(
        uid=f"floor-{i % 8}",
        namespace="default",
        name="floor",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(DeviceRecord(AllocatedDevice("gpu", "node-a", f"gpu-{i % 8}")),),
    )
    start = time.perf_counter()
    db.apply([database.Put(rec)])
    floor.commits.append(time.perf_counter() - start)
    start = time.perf_counter()
    fsutil.atomic_write(cdi_dir / "floor.json", SPEC)
    fsutil.remove_file(cdi_dir / "floor.json")
    floor.specs.append(time.perf_counter() - start)
    start = time.perf_counter()
    await plugin.prepare_raw([])
    floor.rpcs.append(time.perf_counter() - start)


async def lifecycles_and_floors(
    plugin: PluginConnection, refs: Sequence[KubeletClaim], root: Path, cdi_dir: Path
) -> tuple[list[float], Floor, Floor]:
    """Each claim's prepare + unprepare, each followed by one sample of every floor part;
    then as many floor samples again with nothing between them (the floor alone)."""
    db = database.RecordDatabase(root / "floor.db")
    db.open()
    cdi_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
    beside, alone = Floor(), Floor()
    samples = []
    try:
        for i, ref in enumerate(refs):
            samples += await cycles(plugin, [ref])
            await sample_floor(plugin, db, cdi_dir, beside, i)
        for i in range(len(refs)):
            await sample_floor(plugin, db, cdi_dir, alone, i)
    finally:
        db.close()
    return samples, beside, alone


async def api_floor() -> float:
    """What the API calls of one lifecycle cost against the stand-in: GET and finalizer
    PATCH on prepare, GET and PATCH on unprepare."""
    from dralet.kube.claims import ClaimClient
    from dralet.kube.client import connect

    async with ApiServer(kubernetes_version="1.34") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        async with await connect(url=api.url) as client:
            claims = ClaimClient(client)
            samples = []
            for i in range(FLOOR_SAMPLES // 3):
                ref = cluster.allocate_claim(f"floor-{i}", [("gpu", "gpu-0")])
                start = time.perf_counter()
                current = await claims.get_claim(ref.namespace, ref.name)
                await claims.add_finalizer(
                    ref.namespace, ref.name, ref.uid, f"{DRIVER}/prepared", current=current
                )
                await claims.remove_finalizer(
                    ref.namespace, ref.name, ref.uid, f"{DRIVER}/prepared"
                )
                samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run_driver_rss(root: Path) -> float:
    """RSS of ``dralet run --driver example`` once registered and publishing to the API
    stand-in (a process of its own, started as a user starts it)."""
    root.mkdir(parents=True)  # noqa: ASYNC240
    paths = DriverPaths(root, driver_name=DRIVER)
    async with ApiServer(kubernetes_version="1.37") as api:
        cluster = ControlPlane(api)
        cluster.add_node()
        driver = DriverProcess(
            driver_args(paths, api_url=api.url), log_path=root / "driver.log", mode="exec"
        )
        kubelet = KubeletEmulator(paths.registry_dir, kubelet_version="1.37")
        driver.start()
        try:
            await kubelet.wait_for_plugin(DRIVER, within=120)
            deadline = time.monotonic() + 30
            while not cluster.slices() and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # the stand-in's store, polled
            await asyncio.sleep(2)  # settled: registered, slices published, idle
            assert driver.pid is not None
            return rss_mb(driver.pid)
        finally:
            await kubelet.close()
            await driver.terminate()


@dataclass
class Concurrent:
    latencies: list[float] = field(default_factory=list)
    refused: int = 0
    driver_cpu: float = 0.0
    """CPU seconds the driver process used meanwhile."""
    clients_cpu: float = 0.0
    """CPU seconds the clients (this process: kubelet emulator, gRPC) used meanwhile."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def concurrent_clients(
    plugin: PluginConnection, duration: float, base: int, driver_pid: int
) -> Concurrent:
    out = Concurrent()
    driver_before, clients_before = cpu_seconds(driver_pid), time.process_time()
    pool = [claim(base + i) for i in range(OVERLAP_POOL)]
    deadline = time.monotonic() + duration

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            ref = rng.choice(pool)
            start = time.perf_counter()
            result = await plugin.prepare([ref])
            out.latencies.append(time.perf_counter() - start)
            if result.claims[ref.uid].error:
                out.refused += 1  # its device is another claim's: a correct refusal
            await plugin.unprepare([ref])

    await asyncio.gather(*(client(seed) for seed in range(CONCURRENT_CLIENTS)))
    out.driver_cpu = cpu_seconds(driver_pid) - driver_before
    out.clients_cpu = time.process_time() - clients_before
    return out


@dataclass
class NullFloor:
    one_claim: float
    """Median 1-claim prepare call."""
    hammer: Concurrent


async def null_floor(root: Path, duration: float, calls: int) -> NullFloor:
    """``calls`` 1-claim prepare calls, then the concurrent clients, against
    ``null_plugin.py``."""
    root.mkdir(parents=True)  # noqa: ASYNC240
    socket = root / "null.sock"
    process = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, str(HERE / "null_plugin.py"), str(socket)]
    )
    info = pluginregistration_v1_pb2.PluginInfo(
        type=DRA_PLUGIN_TYPE, name=DRIVER, endpoint=str(socket), supported_versions=[V1]
    )
    plugin = PluginConnection(info, V1, socket)
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"null_plugin.py did not serve {socket}")
            await asyncio.sleep(0.05)
        one_claim = []
        for i in range(calls):
            one_claim.append(await one_call(plugin, [claim(i)], prepare=True))
            await one_call(plugin, [claim(i)], prepare=False)
        hammer = await concurrent_clients(plugin, duration, 0, process.pid)
        return NullFloor(statistics.median(one_claim), hammer)
    finally:
        await plugin.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


async def run(args: argparse.Namespace, root: Path) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    cdi_tmpfs = Path(tempfile.mkdtemp(prefix="dralet-bench-cdi-", dir=TMPFS))
    try:
        singles = [claim(BATCH + i) for i in range(args.cycles)]
        async with node(
            root / "main",
            claims=BATCH + args.cycles,
            devices=BATCH + args.cycles,
            cdi_dir=cdi_tmpfs,
        ) as main:
            await cycles(main.plugin, singles[: len(singles) // 4])  # warm-up, not measured
            empty, floor_parts, floor_alone = await lifecycles_and_floors(
                main.plugin, singles, root, cdi_tmpfs / "floor"
            )
            one_claim = []
            for ref in singles[: args.cycles // 2]:
                one_claim.append(await one_call(main.plugin, [ref], prepare=True))
                await one_call(main.plugin, [ref], prepare=False)
            batch = [claim(i) for i in range(BATCH)]
            prepares, unprepares = [], []
            for repeat in range(BATCH_REPEATS):
                prepares.append(await one_call(main.plugin, batch, prepare=True))
                if repeat < BATCH_REPEATS - 1:
                    unprepares.append(await one_call(main.plugin, batch, prepare=False))
            full = await cycles(main.plugin, singles)  # with the 1,000 recorded
            unprepares.append(await one_call(main.plugin, batch, prepare=False))
            batch_prepare = statistics.median(prepares)
            batch_unprepare = statistics.median(unprepares)
        api = await api_floor()

        ext4_cdi = root / "ext4-cdi"
        async with node(root / "ext4", claims=BATCH, devices=BATCH, cdi_dir=ext4_cdi) as ext4:
            ext4_prepare = await one_call(
                ext4.plugin, [claim(i) for i in range(BATCH)], prepare=True
            )

        async with node(
            root / "trace", claims=BATCH + 1, devices=BATCH + 1, cdi_dir=cdi_tmpfs, trace=True
        ) as traced:
            before = traced.fsyncs()
            await cycles(traced.plugin, [claim(BATCH)])
            lifecycle_fsyncs = traced.fsyncs() - before
            before = traced.fsyncs()
            await one_call(traced.plugin, [claim(i) for i in range(BATCH)], prepare=True)
            batch_fsyncs = traced.fsyncs() - before

        async with node(
            root / "rss",
            claims=RSS_CLAIMS + OVERLAP_POOL,
            devices=RSS_CLAIMS + OVERLAP_POOL // 2,
            cdi_dir=cdi_tmpfs / "rss",  # as the 1-claim calls it is compared with
        ) as big:
            idle_rss = big.rss_mb()
            for start in range(0, RSS_CLAIMS, BATCH):
                await one_call(
                    big.plugin, [claim(i) for i in range(start, start + BATCH)], prepare=True
                )
            full_rss = big.rss_mb()
            hammer = await concurrent_clients(
                big.plugin, args.duration, RSS_CLAIMS, big.process.pid
            )
            violations = big.violations()
        nothing = await null_floor(root / "null", args.duration, args.cycles // 2)
        real_rss = await run_driver_rss(root / "run")
    finally:
        shutil.rmtree(cdi_tmpfs, ignore_errors=True)

    p50_empty, p50_full = statistics.median(empty), statistics.median(full)
    per_claim = batch_prepare / BATCH
    p50_one = statistics.median(one_claim)
    floor = floor_parts.total()
    commit, spec, rpc = floor_parts.medians()
    p99 = percentile(hammer.latencies, 0.99)
    null_p99 = percentile(nothing.hammer.latencies, 0.99)
    rows += [
        ("lifecycle p50, 1,000 recorded / none",
         f"{p50_full * 1e3:.2f} / {p50_empty * 1e3:.2f} ms", f"{p50_full / p50_empty:.2f}x"),
        (f"1,000 claims in one prepare call (CDI on tmpfs), median of {BATCH_REPEATS}",
         f"{batch_prepare:.3f} s = {BATCH / batch_prepare:,.0f} claims/s", ""),
        ("  the first of them (a driver that never saw such a call)",
         f"{prepares[0]:.3f} s = {BATCH / prepares[0]:,.0f} claims/s", ""),
        ("  per claim / a 1-claim prepare call",
         f"{per_claim * 1e3:.3f} / {p50_one * 1e3:.2f} ms", f"{per_claim / p50_one:.2f}x"),
        ("  the same on ext4 (CDI dir on the plugin disk)",
         f"{ext4_prepare:.3f} s = {BATCH / ext4_prepare:,.0f} claims/s", ""),
        (f"  unprepare of the 1,000 in one call, median of {BATCH_REPEATS}",
         f"{batch_unprepare:.3f} s = {BATCH / batch_unprepare:,.0f} claims/s", ""),
        (f"one lifecycle / its floor ({LIFECYCLE_COMMITS} commits + spec + 2 RPCs)",
         f"{p50_empty * 1e3:.2f} / {floor * 1e3:.2f} ms", f"{p50_empty / floor:.2f}x"),
        ("  the same over the floor sampled alone, after",
         f"{p50_empty * 1e3:.2f} / {floor_alone.total() * 1e3:.2f} ms",
         f"{p50_empty / floor_alone.total():.2f}x"),
        ("  floor parts: commit, spec write+remove, RPC",
         f"{commit * 1e3:.2f}, {spec * 1e3:.2f}, {rpc * 1e3:.2f} ms", ""),
        ("  API calls of a lifecycle (stand-in, not in the floor)", f"{api * 1e3:.2f} ms", ""),
        (f"{CONCURRENT_CLIENTS} clients {args.duration:g} s: prepare p99 / 1-claim p50",
         f"{p99 * 1e3:.1f} / {p50_one * 1e3:.2f} ms ({len(hammer.latencies):,} calls)",
         f"{p99 / p50_one:.1f}x"),
        ("  CPU meanwhile: driver / clients (kubelet emulator) / all cores",
         f"{hammer.driver_cpu:.1f} / {hammer.clients_cpu:.1f} / "
         f"{(os.cpu_count() or 1) * args.duration:g} s "
         f"({len(hammer.latencies) / args.duration:,.0f} prepares/s)", ""),
        ("  a plugin that does nothing, same clients: p99 / dralet's 1-claim p50",
         f"{null_p99 * 1e3:.1f} / {p50_one * 1e3:.2f} ms "
         f"({len(nothing.hammer.latencies):,} calls)", f"{null_p99 / p50_one:.1f}x"),
        ("    its own 1-claim p50; CPU: it / clients",
         f"{nothing.one_claim * 1e3:.2f} ms; {nothing.hammer.driver_cpu:.1f} / "
         f"{nothing.hammer.clients_cpu:.1f} s", ""),
        ("  dralet's p99 / that plugin's p99 (the same load)",
         f"{p99 * 1e3:.1f} / {null_p99 * 1e3:.1f} ms", f"{p99 / null_p99:.1f}x"),
        ("  device asked of the hardware while another claim held it",
         f"{violations} ({hammer.refused:,} correct refusals)", ""),
        ("fsyncs: one lifecycle / one 1,000-claim prepare call",
         f"{lifecycle_fsyncs} / {batch_fsyncs}", ""),
        (f"driver RSS idle / {RSS_CLAIMS:,} claims prepared",
         f"{idle_rss:.0f} / {full_rss:.0f} MB", ""),
        ("  `dralet run --driver example` idle, with the Kubernetes client",
         f"{real_rss:.0f} MB", ""),
    ]  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("bench_store needs strace (to count fsyncs)")
    with tempfile.TemporaryDirectory(prefix="dralet-bench-", dir="/var/tmp") as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':{width}}  {'measured':>44}  {'ratio':>7}")
    for name, measured, ratio in rows:
        print(f"{name:{width}}  {measured:>44}  {ratio:>7}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
