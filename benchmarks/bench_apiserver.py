"""The claim path against a real control plane, dralet beside the upstream Go driver.

etcd and kube-apiserver of the release ``make k8s`` built (tests/k8scluster.py), the
driver under test as a real process reading real ResourceClaims, and the kubelet emulator
calling it over DRA gRPC v1. Three rows of figures, measured in this one run:

- ``dralet``: ``dralet run --driver example``, its CDI dir and its backend's state (the
  simulated GPUs' "hardware", which the backend commits with an fsync per device under
  one lock: a real device keeps that state itself, and the floor makes no such write) on
  tmpfs; its records on disk;
- ``Go reference``: upstream's ``k8s.io/kubernetes/test/e2e/dra/test-driver``
  ``kubelet-plugin``, built from the module pins of k8s/v1.<minor>/go.mod by
  ``scripts/dra-test-driver-build`` (``--go-driver PATH`` or ``$DRALET_GO_DRIVER``; the
  row is left out when it is not built), run with its client throttle raised
  (``--kube-api-qps``/``--kube-api-burst``) so that the driver is measured, not its
  rate limiter;
- ``floor``: a bare HTTP client (aiohttp, the admin's client certificate) making the
  requests dralet needs per claim (one GET, a strategic-merge PATCH adding the
  finalizer, one removing it) at the same concurrency, plus the durable writes a claim
  needs (four fsynced record commits, the CDI spec written atomically and removed).

Measures: a one-claim prepare + unprepare cycle (p50/p99), driver and kube-apiserver +
etcd CPU per cycle, ResourceClaim requests per cycle by verb (the server's own
``apiserver_request_total``), one call of ``--batch`` claims (prepare; unprepare as the
kubelet sees it, and the finalizer removals drained after it), ``--clients`` concurrent
clients doing one-claim cycles, and the driver's RSS idle and with the batch prepared.

    .venv/bin/python benchmarks/bench_apiserver.py [--cycles 200] [--batch 1000]
        [--profile OUT] [--base-src DIR]

``--base-src DIR`` adds a row for the dralet of another source tree (a worktree of an
earlier commit), measured in the same run: a change is compared with its base on the
same control plane and the same load.

``--profile OUT`` samples dralet's process with py-spy during the one-claim cycles, the
batch's prepare call and its unprepare call until answered (the threads holding the GIL:
where its Python CPU goes, not where it waits), writes the collapsed stacks to OUT,
OUT.batch and OUT.unprepare and prints the shares by module; ``py-spy`` must be on PATH
or beside the interpreter.

It prints a table; it is not a timed test. Without the control plane's binaries it says
so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import k8scluster  # noqa: E402

from dralet import fsutil  # noqa: E402
from dralet.cluster.process import DriverPaths, DriverProcess, driver_args  # noqa: E402
from dralet.kubelet import KubeletClaim, KubeletEmulator, PluginConnection  # noqa: E402
from dralet.kubelet.results import KubeletError  # noqa: E402

DRIVER = "gpu.example.com"
NODE = "node-a"
NAMESPACE = "default"
FINALIZER = f"{DRIVER}/prepared"
TMPFS = Path("/dev/shm")
GO_DRIVER_ENV = "DRALET_GO_DRIVER"
BASE_ROW = "dralet (base)"
"""The row of ``--base-src``: the same driver from another source tree."""
GO_QPS = "100000"
SETUP_CONCURRENCY = 32
SETTLE_SECONDS = 2.0
DRAIN_WITHIN = 120.0
DRAIN_POLL = 0.05
RECORD_COMMITS = 4
"""Record commits of one claim's prepare + unprepare (intent, completion, UnprepareStarted,
removal): the durable writes the floor makes beside its requests."""
SPEC = b'{"cdiVersion":"0.5.0","kind":"gpu.example.com/claim","devices":[]}' + b" " * 400
REQUEST_LINE = re.compile(
    r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.MULTILINE
)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (proc(5): fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------ the API, bare


class Api:
    """A bare HTTPS client of the control plane with the admin's client certificate."""

    def __init__(self, cluster: k8scluster.Cluster) -> None:
        config = yaml.safe_load(cluster.admin_kubeconfig.read_text())
        user = config["users"][0]["user"]
        context = ssl.create_default_context(
            cafile=config["clusters"][0]["cluster"]["certificate-authority"]
        )
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        self.url = cluster.url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0))

    async def close(self) -> None:
        await self.session.close()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: Sequence[int] = (200, 201),
    ) -> Any:
        async with self.session.request(
            method,
            self.url + path,
            json=body,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        ) as response:
            data = await response.read()
            if response.status not in ok:
                raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
            return data

    async def request_counts(self) -> dict[str, float]:
        """ResourceClaim requests served so far, by verb (kube-apiserver's own metric)."""
        text = (await self.call("GET", "/metrics")).decode()
        counts: dict[str, float] = {}
        for match in REQUEST_LINE.finditer(text):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            if labels.get("resource") == "resourceclaims" and not labels.get("subresource"):
                verb = labels.get("verb", "")
                counts[verb] = counts.get(verb, 0.0) + float(match["value"])
        return counts


def claim_path(name: str = "") -> str:
    base = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    return f"{base}/{name}" if name else base


async def bounded(items: Sequence[Any], work: Callable[[Any], Awaitable[Any]], limit: int) -> None:
    slots = asyncio.Semaphore(limit)

    async def one(item: Any) -> None:
        async with slots:
            await work(item)

    await asyncio.gather(*(one(item) for item in items))


async def make_claims(api: Api, prefix: str, devices: Sequence[str]) -> list[KubeletClaim]:
    """One allocated ResourceClaim per device, named ``<prefix>-<i>``."""

    async def make(index: int) -> KubeletClaim:
        name = f"{prefix}-{index}"
        created = json.loads(
            await api.call(
                "POST",
                claim_path(),
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]
                        }
                    },
                },
            )
        )
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": devices[index]}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": f"pod-{name}", "uid": f"pod-{name}"}],
        }
        await api.call(
            "PATCH",
            claim_path(name) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        return KubeletClaim(NAMESPACE, str(created["metadata"]["uid"]), name)

    made: dict[int, KubeletClaim] = {}

    async def record(index: int) -> None:
        made[index] = await make(index)

    await bounded(range(len(devices)), record, SETUP_CONCURRENCY)
    return [made[i] for i in range(len(devices))]


async def holding(api: Api, prefix: str) -> int:
    """Claims named ``<prefix>-…`` that still carry a finalizer. Parsed as JSON: a
    YAML parse of a list of a thousand claims takes this process seconds of CPU, which
    the driver (on the same cores) would pay for in its drain figure."""
    listed = json.loads(await api.call("GET", claim_path()))
    return sum(
        1
        for item in listed.get("items") or []
        if item["metadata"]["name"].startswith(prefix + "-") and item["metadata"].get("finalizers")
    )


# ------------------------------------------------------------------ the drivers


@dataclass
class Target:
    name: str
    prefix: str
    devices: list[str]
    start: Callable[[Path], Awaitable[tuple[int, Callable[[], Awaitable[None]]]]]
    """Start the driver in a folder; its pid and how to stop it."""
    registry: Path = field(default_factory=Path)


@dataclass
class Figures:
    cycle_p50: float = 0.0
    cycle_p99: float = 0.0
    driver_cpu: float = 0.0
    server_cpu: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)
    batch_prepare: float = 0.0
    batch_unprepare: float = 0.0
    batch_drain: float = 0.0
    clients_rate: float = 0.0
    clients_p99: float = 0.0
    rss_idle: float = 0.0
    rss_batch: float = 0.0


def dralet_target(
    cluster: k8scluster.Cluster,
    count: int,
    tmpfs: Path,
    *,
    name: str = "dralet",
    prefix: str = "d",
    src: Path | None = None,
) -> Target:
    """``dralet run --driver example``; with ``src``, the dralet of that source tree (its
    ``src`` folder first on the driver's ``PYTHONPATH``: another commit, measured in the
    same run)."""

    async def start(root: Path) -> tuple[int, Callable[[], Awaitable[None]]]:
        root.mkdir(parents=True)  # noqa: ASYNC240
        paths = DriverPaths(root, driver_name=DRIVER, node_name=NODE)
        args = driver_args(
            paths,
            api_url=None,
            gpus=count,
            extra=[
                "--kubeconfig", str(cluster.admin_kubeconfig),
                "--cdi-dir", str(tmpfs / f"{prefix}-cdi"),
                "--log-level", "warning",
                "--state-dir", str(tmpfs / f"{prefix}-backend"),
            ],
        )  # fmt: skip
        env = {"PYTHONPATH": str(src / "src")} if src is not None else {}
        process = DriverProcess(args, log_path=root / "driver.log", mode="exec", env=env)
        process.start()
        target.registry = paths.registry_dir
        assert process.pid is not None
        return process.pid, process.terminate

    target = Target(name, prefix, [f"gpu-{i}" for i in range(count)], start)
    return target


def go_target(cluster: k8scluster.Cluster, binary: Path, count: int, tmpfs: Path) -> Target:
    async def start(root: Path) -> tuple[int, Callable[[], Awaitable[None]]]:
        registry = root / "registry"
        registry.mkdir(parents=True)
        # It makes the plugins folder but not the driver's own under it, where it listens.
        (root / "plugins" / DRIVER).mkdir(parents=True)
        log = (root / "go-driver.log").open("wb")
        process = subprocess.Popen(  # noqa: ASYNC220
            [
                str(binary),
                "--drivername", DRIVER,
                "--kubeconfig", str(cluster.admin_kubeconfig),
                "--kube-api-qps", GO_QPS,
                "--kube-api-burst", GO_QPS,
                "kubelet-plugin",
                "--plugin-registration-path", str(registry),
                "--datadir", str(root / "plugins"),
                "--cdi-dir", str(tmpfs / "go-cdi"),
                "--node-name", NODE,
                "--num-devices", str(count),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        target.registry = registry

        async def stop() -> None:
            process.terminate()
            await asyncio.to_thread(process.wait, 30)
            log.close()

        return process.pid, stop

    target = Target("Go reference", "g", [f"device-{i:02d}" for i in range(count)], start)
    return target


async def cycle(plugin: PluginConnection, ref: KubeletClaim) -> float:
    start = time.perf_counter()
    prepared = await plugin.prepare([ref])
    assert prepared.kubelet_error == "", prepared.kubelet_error[:300]
    unprepared = await plugin.unprepare([ref])
    assert unprepared.kubelet_error == "", unprepared.kubelet_error[:300]
    return time.perf_counter() - start


async def measure_target(
    target: Target, api: Api, server_pids: Sequence[int], args: argparse.Namespace, root: Path
) -> Figures:
    out = Figures()
    claims = await make_claims(api, target.prefix, target.devices)
    pid, stop = await target.start(root / target.prefix)
    kubelet = KubeletEmulator(target.registry, kubelet_version=args.kubelet_version)
    try:
        plugin = await kubelet.wait_for_plugin(DRIVER, within=120)
        await asyncio.sleep(SETTLE_SECONDS)
        out.rss_idle = rss_mib(pid)
        await cycle(plugin, claims[-1])  # warm: connections, version negotiation
        await wait_drained(api, target.prefix)

        ones = claims[: args.cycles]
        driver_before = cpu_seconds(pid)
        server_before = sum(cpu_seconds(p) for p in server_pids)
        counts_before = await api.request_counts()
        profiler = (
            start_profiler(pid, args.profile) if args.profile and target.prefix == "d" else None
        )
        samples = [await cycle(plugin, ref) for ref in ones]
        if profiler is not None:
            await stop_profiler(profiler)
        await wait_drained(api, target.prefix)
        counts_after = await api.request_counts()
        out.driver_cpu = (cpu_seconds(pid) - driver_before) / len(ones)
        out.server_cpu = (sum(cpu_seconds(p) for p in server_pids) - server_before) / len(ones)
        out.requests = {
            verb: (counts_after.get(verb, 0.0) - counts_before.get(verb, 0.0)) / len(ones)
            for verb in sorted(set(counts_after) | set(counts_before))
            if verb in ("GET", "PATCH", "UPDATE", "LIST", "POST")
        }
        out.requests.pop("LIST", None)
        out.cycle_p50 = statistics.median(samples)
        out.cycle_p99 = percentile(samples, 0.99)

        batch = claims[: args.batch]
        start = time.perf_counter()
        profiler = (
            start_profiler(pid, args.profile + BATCH_PROFILE)
            if args.profile and target.prefix == "d"
            else None
        )
        prepared = await plugin.prepare(batch)
        out.batch_prepare = len(batch) / (time.perf_counter() - start)
        if profiler is not None:
            await stop_profiler(profiler)
        assert prepared.kubelet_error == "", prepared.kubelet_error[:300]
        out.rss_batch = rss_mib(pid)
        profiler = (
            start_profiler(pid, args.profile + UNPREPARE_PROFILE)
            if args.profile and target.prefix == "d"
            else None
        )
        start = time.perf_counter()
        unprepared = await plugin.unprepare(batch)
        answered = time.perf_counter() - start
        if profiler is not None:
            await stop_profiler(profiler)
        assert unprepared.kubelet_error == "", unprepared.kubelet_error[:300]
        out.batch_unprepare = len(batch) / answered
        await wait_drained(api, target.prefix)
        out.batch_drain = len(batch) / (time.perf_counter() - start)

        out.clients_rate, out.clients_p99 = await clients(
            plugin, claims, args.clients, args.duration
        )
        await wait_drained(api, target.prefix)
    finally:
        await kubelet.close()
        await stop()
    return out


def start_profiler(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` into ``out`` as collapsed stacks, until SIGINT."""
    beside = Path(sys.executable).parent / "py-spy"
    binary = str(beside) if beside.is_file() else (shutil.which("py-spy") or "py-spy")
    return subprocess.Popen(
        [binary, "record", "--pid", str(pid), "--rate", "500", "--format", "raw",
         "--output", out, "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


async def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    profiler.send_signal(signal.SIGINT)
    await asyncio.to_thread(profiler.wait, 30)


BATCH_PROFILE = ".batch"
"""Suffix of the profile of the batch's prepare call, beside the cycles' one."""
UNPREPARE_PROFILE = ".unprepare"
"""Suffix of the profile of the batch's unprepare call, until it is answered."""
FRAME_FILE = re.compile(r"\(([^():]+):\d+\)")
OUTER = ("dralet/cli/", "dralet/node/driver.py")
"""Frames every sample passes through: a sample is charged to the innermost other one."""


def profile_areas(path: Path, top: int = 15) -> list[tuple[str, float]]:
    """Shares of the sampled CPU by the innermost dralet module of each stack (or, with
    none, the library the stack ends in: the event loop, gRPC's, aiohttp's)."""
    areas: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        files = FRAME_FILE.findall(stack)
        inner = next(
            (f for f in reversed(files) if "dralet/" in f and not any(o in f for o in OUTER)),
            None,
        )
        if inner is not None:
            area = inner.split("dralet/", 1)[1].removesuffix(".py")
        else:
            leaf = files[-1] if files else ""
            area = "(no dralet frame) " + (leaf.split("site-packages/")[-1].split("/")[0] or "?")
        areas[area] = areas.get(area, 0) + int(count)
        total += int(count)
    ranked = sorted(areas.items(), key=lambda item: -item[1])[:top]
    return [(area, count / total) for area, count in ranked] if total else []


async def wait_drained(api: Api, prefix: str) -> None:
    deadline = time.monotonic() + DRAIN_WITHIN
    while await holding(api, prefix):
        if time.monotonic() > deadline:
            raise RuntimeError(f"finalizers of {prefix}-… still there after {DRAIN_WITHIN}s")
        await asyncio.sleep(DRAIN_POLL)


async def clients(
    plugin: PluginConnection, claims: Sequence[KubeletClaim], count: int, duration: float
) -> tuple[float, float]:
    """``count`` clients, each cycling its own claims for ``duration`` s: cycles/s, p99."""
    latencies: list[float] = []
    deadline = time.monotonic() + duration

    async def client(index: int) -> None:
        own = claims[index::count]
        turn = 0
        while time.monotonic() < deadline:
            latencies.append(await cycle(plugin, own[turn % len(own)]))
            turn += 1

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(count)))
    return len(latencies) / (time.perf_counter() - start), percentile(latencies, 0.99)


# ------------------------------------------------------------------ the floor


async def floor(
    api: Api, server_pids: Sequence[int], args: argparse.Namespace, root: Path, tmpfs: Path
) -> Figures:
    """The same requests by a bare client, plus the durable writes, at the same
    concurrency: what any driver keeping dralet's promises pays per claim (its "driver
    CPU" is this process's: the client's and the writes')."""
    out = Figures()
    claims = await make_claims(api, "f", [f"gpu-{i}" for i in range(args.batch)])
    store = root / "floor-store"
    store.mkdir()
    cdi = tmpfs / "floor-cdi"
    cdi.mkdir()

    def commit(uid: str) -> None:
        fsutil.atomic_write(store / uid, b"x" * 200)

    def spec(uid: str) -> None:
        path = cdi / f"{uid}.json"
        fsutil.atomic_write(path, SPEC)
        path.unlink()

    async def add(ref: KubeletClaim) -> None:
        await api.call("GET", claim_path(ref.name))
        patch = {"metadata": {"uid": ref.uid, "finalizers": [FINALIZER]}}
        await api.call(
            "PATCH", claim_path(ref.name), patch,
            content_type="application/strategic-merge-patch+json",
        )  # fmt: skip

    async def remove(ref: KubeletClaim) -> None:
        patch = {"metadata": {"uid": ref.uid, "$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        await api.call(
            "PATCH", claim_path(ref.name), patch,
            content_type="application/strategic-merge-patch+json",
        )  # fmt: skip

    async def one(ref: KubeletClaim) -> float:
        start = time.perf_counter()
        await add(ref)
        for _ in range(RECORD_COMMITS):
            await asyncio.to_thread(commit, ref.uid)
        await asyncio.to_thread(spec, ref.uid)
        await remove(ref)
        return time.perf_counter() - start

    ones = claims[: args.cycles]
    client_before = time.process_time()
    server_before = sum(cpu_seconds(p) for p in server_pids)
    samples = [await one(ref) for ref in ones]
    out.driver_cpu = (time.process_time() - client_before) / len(ones)
    out.server_cpu = (sum(cpu_seconds(p) for p in server_pids) - server_before) / len(ones)
    out.cycle_p50 = statistics.median(samples)
    out.cycle_p99 = percentile(samples, 0.99)
    out.requests = {"GET": 1.0, "PATCH": 2.0}
    batch = claims[: args.batch]
    start = time.perf_counter()
    await bounded(batch, add, args.api_limit)
    out.batch_prepare = len(batch) / (time.perf_counter() - start)
    start = time.perf_counter()
    await bounded(batch, remove, args.api_limit)
    out.batch_drain = len(batch) / (time.perf_counter() - start)

    latencies: list[float] = []
    deadline = time.monotonic() + args.duration

    async def client(index: int) -> None:
        own = claims[index :: args.clients]
        turn = 0
        while time.monotonic() < deadline:
            latencies.append(await one(own[turn % len(own)]))
            turn += 1

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(args.clients)))
    out.clients_rate = len(latencies) / (time.perf_counter() - start)
    out.clients_p99 = percentile(latencies, 0.99)
    return out


# ------------------------------------------------------------------ the table


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def table(rows: dict[str, Figures]) -> list[list[str]]:
    names = list(rows)
    lines = [["measure", *names, *(f"dralet / {n}" for n in names[1:])]]

    def line(label: str, show: Callable[[Figures], str], value: Callable[[Figures], float]) -> None:
        dralet = rows["dralet"]
        lines.append(
            [
                label,
                *(show(rows[n]) for n in names),
                *(ratio(value(dralet), value(rows[n])) for n in names[1:]),
            ]
        )

    line("one claim, prepare + unprepare, p50", lambda f: ms(f.cycle_p50), lambda f: f.cycle_p50)
    line("one claim, prepare + unprepare, p99", lambda f: ms(f.cycle_p99), lambda f: f.cycle_p99)
    line("driver CPU per cycle", lambda f: ms(f.driver_cpu), lambda f: f.driver_cpu)
    line("kube-apiserver + etcd CPU per cycle", lambda f: ms(f.server_cpu), lambda f: f.server_cpu)
    line(
        "ResourceClaim requests per cycle",
        lambda f: " + ".join(f"{v:.2f} {k}" for k, v in f.requests.items() if v) or "0",
        lambda f: sum(f.requests.values()),
    )
    line(
        "one call of the batch: prepare, claims/s",
        lambda f: f"{f.batch_prepare:,.0f}",
        lambda f: 1 / f.batch_prepare if f.batch_prepare else 0.0,
    )
    line(
        "unprepare as the kubelet sees it, claims/s",
        lambda f: f"{f.batch_unprepare:,.0f}" if f.batch_unprepare else "-",
        lambda f: 1 / f.batch_unprepare if f.batch_unprepare else 0.0,
    )
    line(
        "unprepare until finalizers gone, claims/s",
        lambda f: f"{f.batch_drain:,.0f}",
        lambda f: 1 / f.batch_drain if f.batch_drain else 0.0,
    )
    line(
        "clients' one-claim cycles, cycles/s",
        lambda f: f"{f.clients_rate:,.0f}",
        lambda f: 1 / f.clients_rate if f.clients_rate else 0.0,
    )
    line("clients' cycle p99", lambda f: ms(f.clients_p99), lambda f: f.clients_p99)
    line(
        "RSS idle / batch prepared",
        lambda f: f"{f.rss_idle:.0f} / {f.rss_batch:.0f} MiB" if f.rss_idle else "-",
        lambda f: f.rss_idle,
    )
    return lines


def print_table(lines: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    for index, row in enumerate(lines):
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("-+-".join("-" * width for width in widths))


async def run(args: argparse.Namespace, cluster: k8scluster.Cluster, root: Path) -> None:
    api = Api(cluster)
    shm = TMPFS if TMPFS.is_dir() else None  # noqa: ASYNC240
    tmpfs = Path(tempfile.mkdtemp(prefix="dralet-bench-", dir=shm))
    try:
        await api.call(
            "POST",
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}},
        )
        await api.call(
            "POST",
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        server_pids = [cluster.processes[name].pid for name in ("etcd", "kube-apiserver")]
        count = max(args.batch, args.cycles)
        targets = [dralet_target(cluster, count, tmpfs)]
        if args.base_src:
            base = Path(args.base_src)
            targets.append(
                dralet_target(cluster, count, tmpfs, name=BASE_ROW, prefix="b", src=base)
            )
        go_driver = Path(args.go_driver) if args.go_driver else None
        if go_driver is not None and go_driver.is_file():
            targets.append(go_target(cluster, go_driver, count, tmpfs))
        else:
            print(f"(no Go reference driver at {go_driver}: scripts/dra-test-driver-build)")
        rows: dict[str, Figures] = {}
        for target in targets:
            print(f"measuring {target.name} …", flush=True)
            try:
                rows[target.name] = await measure_target(target, api, server_pids, args, root)
            except KubeletError as error:
                if target.name == "dralet":
                    raise
                logs = sorted((root / target.prefix).glob("*.log"))
                tail = logs[0].read_text(errors="replace")[-3000:] if logs else ""
                print(f"{target.name} left out: {error}\n{tail}", flush=True)
        print("measuring the floor …", flush=True)
        rows["floor"] = await floor(api, server_pids, args, root, tmpfs)
    finally:
        await api.close()
        shutil.rmtree(tmpfs, ignore_errors=True)
    print(
        f"\nreal control plane {cluster.release} (etcd + kube-apiserver), {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}; {args.cycles} one-claim cycles, a batch of "
        f"{args.batch}, {args.clients} clients for {args.duration:g} s\n"
    )
    print_table(table(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--api-limit", type=int, default=16, help="the floor's batch concurrency")
    parser.add_argument("--release", default="")
    parser.add_argument("--kubelet-version", default="1.37")
    parser.add_argument("--profile", default="", help="py-spy collapsed stacks of dralet's cycles")
    parser.add_argument("--go-driver", default=os.environ.get(GO_DRIVER_ENV, ""))
    parser.add_argument(
        "--base-src",
        default="",
        help="a dralet source tree (e.g. `git worktree add` of an earlier commit) measured "
        f"in the same run as the row {BASE_ROW!r}",
    )
    args = parser.parse_args()
    if args.base_src:  # the driver runs from another folder
        args.base_src = str(Path(args.base_src).resolve())
    release = (
        k8scluster.find_release(args.release) if args.release else k8scluster.default_release()
    )
    missing = k8scluster.missing_binaries(release)
    if missing:
        print(f"skipped: {missing}")
        return
    root = Path(tempfile.mkdtemp(prefix="dralet-bench-"))
    cluster = k8scluster.Cluster(release, components=("etcd", "kube-apiserver"))
    try:
        cluster.start()
        asyncio.run(run(args, cluster, root))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    for path, what in (
        (args.profile, "the one-claim cycles"),
        (args.profile + BATCH_PROFILE, "the batch's prepare"),
        (args.profile + UNPREPARE_PROFILE, "the batch's unprepare, until answered"),
    ):
        if args.profile and Path(path).is_file():
            print(f"\ndralet's CPU in {what} by module (py-spy, {path}):")
            for area, share in profile_areas(Path(path)):
                print(f"  {share:6.1%}  {area}")


if __name__ == "__main__":
    main()
