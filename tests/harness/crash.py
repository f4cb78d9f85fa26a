"""Crash-point injection: kill a real driver process at a failpoint, restart it, let the
kubelet retry, and prove the node ends up consistent.

One *run* is fully determined by its seed: the failpoint it arms (round-robin over every
declared failpoint, ``sorted(failpoints.known())[seed % len]``), the hit on which it
fires (``name@N=kill``), the claims and the devices they were allocated (some devices
are allocated to two claims, as a scheduler race or a force-deleted pod does, so the
node's exclusivity guard is exercised), and the sequence of kubelet moves: prepare,
pod deletion (unprepare), batched and concurrent calls, kubelet restarts, driver
SIGKILL and SIGTERM, and node reboots (a new boot ID, an emptied CDI dir, a kubelet
that has prepared nothing yet: the next start revalidates every claim). The driver
is a real ``dralet run`` process (``DriverProcess``) talking to its own API
stand-in; when it dies at the failpoint it is started again
without one (sometimes with a second failpoint, so recovery itself is crashed), and the
kubelet emulator retries what a real kubelet would: prepare again for pods still
wanted, unprepare for pods deleted.

Invariants, checked while it runs and once it settles: a claim the kubelet unprepared
successfully is gone everywhere (record, CDI spec, backend, finalizer); a prepare that
succeeded never shares a device with another claim still prepared, and the backend
holds the device for it; a pod still wanted is prepared, or refused because another
prepared claim holds its device (and the error names that claim); ``dralet.node.audit``
finds nothing (every spec has a completed record and vice versa, no device in use
without a record, no device recorded twice, finalizers match prepared claims); and
after every pod is deleted the node is empty. A failing run prints its seed and a
one-line command to rerun it alone.

``run_many`` runs several runs concurrently in one event loop, each with its own
directories, driver and stand-in, and reports failpoint coverage: which declared
failpoints were reached (``DRALET_FAILPOINT_LOG``) and which ones killed the driver.

One file on purpose: a run's schedule, its kubelet moves and its invariant checks share
one seeded state, and a reader debugging a failing seed follows it here end to end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dralet import errors, failpoints, fsutil
from dralet.apiserver import ApiServer
from dralet.cdi import store as cdi_store
from dralet.checkpoint import database
from dralet.cluster import ControlPlane, DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletClaim, KubeletEmulator, KubeletError, PluginConnection
from dralet.node import audit
from dralet.node import claims as claim_checks
from dralet.node.claims.devicemetadata import MetadataFiles
from dralet.node.settings import DriverSettings
from tests.harness import targets

__all__ = [
    "ENV_CONCURRENCY",
    "ENV_RUNS",
    "ENV_SEED",
    "CrashReport",
    "CrashSettings",
    "RunResult",
    "failpoint_for",
    "run_many",
    "run_one",
]

ENV_SEED = "DRALET_CRASH_SEED"
ENV_RUNS = "DRALET_CRASH_RUNS"
ENV_CONCURRENCY = "DRALET_CRASH_CONCURRENCY"
ENV_TARGET = "DRALET_CRASH_TARGET"
KILLED = -9
OWED_WITHIN = 10.0
"""How long the running driver gets for the finalizer removals it owes before an audit."""
OWED_POLL = 0.02
OPERATIONS = (
    "prepare",
    "prepare",
    "prepare-batch",
    "delete-pod",
    "delete-pod",
    "concurrent",
    "kubelet-sync",
    "kubelet-restart",
    "driver-kill",
    "driver-term",
    "node-reboot",
)
RERUN_COMMAND = f"{ENV_SEED}={{seed}} {ENV_RUNS}=1 .venv/bin/pytest tests/crash -k test_crash_runs"
BUSY_MARKER = "is still prepared for claim "


@dataclass(frozen=True)
class CrashSettings:
    """Size and shape of a crash campaign; every field has a CI-size default."""

    runs: int = 200
    """Kill/restart runs (``DRALET_CRASH_RUNS``; 5000 for a nightly run)."""
    base_seed: int = 1
    """Seed of the first run; run ``i`` uses ``base_seed + i`` (``DRALET_CRASH_SEED``)."""
    concurrency: int = 6
    """Runs in flight at once, each with its own driver process and stand-in."""
    claims: int = 4
    """Claims per run, one pod each."""
    gpus: int = 3
    """Simulated GPUs per node: fewer than the claims need, so some are allocated twice."""
    steps: int = 12
    """Kubelet moves per run before it settles."""
    max_nth: int = 3
    """The armed failpoint fires on a random hit between 1 and this."""
    recovery_crash_chance: float = 0.3
    """Chance that the first restart after the crash arms a second failpoint (@1)."""
    max_starts: int = 12
    """Driver starts per run before it counts as a crash loop."""
    settle_rounds: int = 4
    """Kubelet sync rounds once the moves are done."""
    call_timeout: float = 20.0
    """Deadline of one kubelet call (the kubelet's own is 45 s)."""
    start_within: float = 30.0
    """Seconds a started driver has to register with the kubelet."""
    exit_within: float = 10.0
    """Seconds a driver whose calls fail UNAVAILABLE has to be seen exiting."""
    kubernetes_version: str = "1.34"
    target: str = "example"
    """What the runs drive (``tests.harness.targets``; ``DRALET_CRASH_TARGET``)."""
    node_name: str = "node-a"
    keep_passing_runs: bool = False
    """Keep the directories of runs without violations (failing runs are always kept)."""
    rerun_command: str = RERUN_COMMAND
    """How a failing run tells you to rerun it alone."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> CrashSettings:
        """Defaults, then ``overrides``, then ``DRALET_CRASH_*`` from the environment."""
        source = os.environ if env is None else env
        values: dict[str, Any] = dict(overrides)
        if source.get(ENV_RUNS):
            values["runs"] = int(source[ENV_RUNS])
        if source.get(ENV_SEED):
            values["base_seed"] = int(source[ENV_SEED])
        if source.get(ENV_CONCURRENCY):
            values["concurrency"] = int(source[ENV_CONCURRENCY])
        if source.get(ENV_TARGET):
            values["target"] = source[ENV_TARGET]
        return cls(**values)


def declared_failpoints() -> list[str]:
    """Every declared failpoint, in the stable order runs are assigned to them."""
    return sorted(failpoints.known())


def failpoint_for(seed: int, names: Sequence[str] | None = None) -> str:
    """The failpoint run ``seed`` arms: consecutive seeds walk the declared set."""
    ordered = list(names) if names is not None else declared_failpoints()
    return ordered[seed % len(ordered)]


@dataclass
class RunResult:
    seed: int
    failpoint: str
    nth: int
    killed_at: list[str] = field(default_factory=list)
    """Failpoints that killed the driver in this run, in order."""
    starts: int = 0
    violations: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    reached: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0
    root: Path | None = None
    strict: bool = False
    """The driver ran behind the strict backend (``dralet.testing.strict``)."""

    def rerun(self, settings: CrashSettings) -> str:
        return settings.rerun_command.format(seed=self.seed)

    def describe(self, settings: CrashSettings) -> str:
        lines = [
            f"crash run seed={self.seed} failpoint={self.failpoint}@{self.nth} "
            f"killed_at={self.killed_at} starts={self.starts} dir={self.root}",
            *(f"  VIOLATION: {v}" for v in self.violations),
            "  trace:",
            *(f"    {t}" for t in self.trace),
            f"  rerun alone: {self.rerun(settings)}",
        ]
        return "\n".join(lines)


@dataclass
class CrashReport:
    settings: CrashSettings
    results: list[RunResult]
    known: list[str]
    seconds: float

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.violations]

    @property
    def kills(self) -> int:
        return sum(len(r.killed_at) for r in self.results)

    @property
    def reached(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for r in self.results:
            total.update(r.reached)
        return total

    @property
    def killed(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for r in self.results:
            total.update(r.killed_at)
        return total

    @property
    def never_reached(self) -> list[str]:
        reached = self.reached
        return [n for n in self.known if not reached[n]]

    @property
    def never_killed(self) -> list[str]:
        killed = self.killed
        return [n for n in self.known if not killed[n]]

    def coverage_table(self) -> str:
        reached, killed = self.reached, self.killed
        width = max(len(n) for n in self.known)
        rows = [f"{'failpoint':<{width}}  {'hits':>7}  {'kills':>5}"]
        rows += [f"{n:<{width}}  {reached[n]:>7}  {killed[n]:>5}" for n in self.known]
        return "\n".join(rows)

    def summary(self) -> str:
        return (
            f"{len(self.results)} crash runs, {self.kills} kills at failpoints, "
            f"{len(self.failed)} with violations "
            f"({sum(r.strict for r in self.results)} runs behind the strict backend), "
            f"{self.seconds:.1f}s; failpoints reached "
            f"{len(self.known) - len(self.never_reached)}/{len(self.known)}, killed at "
            f"{len(self.known) - len(self.never_killed)}/{len(self.known)}"
        )


@dataclass
class _Pod:
    """The kubelet's view of one pod using one claim."""

    ref: KubeletClaim
    devices: tuple[str, ...]
    wanted: bool = False
    in_cache: bool = False
    """A prepare was sent and no unprepare has succeeded since (the kubelet checkpoints
    the claim before calling, so it unprepares even a claim whose prepare failed)."""
    prepared: bool = False
    last_error: str = ""


class _ApiClaims:
    """``audit.ClaimLister`` over the stand-in's store."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api

    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        return self.api.list("ResourceClaim")


class _Run:
    def __init__(self, settings: CrashSettings, *, seed: int, names: Sequence[str], root: Path):
        self.settings = settings
        self.rng = random.Random(seed)
        self.failpoint = failpoint_for(seed, names)
        self.names = list(names)
        self.nth = self.rng.randint(1, settings.max_nth)
        target = targets.TARGETS[settings.target]
        # Every other round over the failpoints runs the driver behind the strict backend,
        # which checks that release gets back the state prepare returned.
        self.strict = target.supports_strict and (seed // max(1, len(names))) % 2 == 1
        self.result = RunResult(
            seed=seed, failpoint=self.failpoint, nth=self.nth, root=root, strict=self.strict
        )
        self.paths = DriverPaths(root, driver_name=target.driver_name, node_name=settings.node_name)
        self.hit_log = root / "failpoints.log"
        self.boot_id_path = root / "boot_id"
        self.boots = 1
        self.node_settings = DriverSettings(
            driver_name=target.driver_name,
            node_name=settings.node_name,
            plugin_dir=self.paths.plugin_dir,
            registry_dir=self.paths.registry_dir,
            cdi_dir=self.paths.cdi_dir,
            backend_state_dir=self.paths.state_dir,
            boot_id_path=self.boot_id_path,
            device_metadata=True,
        )
        self.specs = cdi_store.SpecStore(self.node_settings.cdi_dir, self.node_settings.cdi_kind)
        self.metadata = MetadataFiles(self.node_settings.plugin_dir)
        self.target = target(self.node_settings, strict=self.strict)
        self.finalizer = claim_checks.finalizer_name(target.driver_name)
        self.pods: list[_Pod] = []
        self.holds: set[str] = set()
        """Claims the driver answered 'prepared' for whose pod has not been deleted since."""
        self.kubelet = KubeletEmulator(
            self.paths.registry_dir,
            kubelet_version=settings.kubernetes_version,
            call_timeout=settings.call_timeout,
        )
        self.driver = DriverProcess(
            self.driver_args(api_url=None),
            log_path=root / "driver.log",
            env={failpoints.ENV_LOG: str(self.hit_log), **self.target.env(root)},
        )
        self.plugin: PluginConnection | None = None
        self.lifecycle = asyncio.Lock()
        self.running = False
        self.armed = ""
        self.expect_exit = False
        self.primary_fired = False
        self.second_chance = False
        self.cluster: ControlPlane | None = None
        self.backend: Any = None
        """The target's view of the hardware (``devices_in_use``), for the audit."""

    # ------------------------------------------------------------------ bookkeeping

    def note(self, line: str) -> None:
        self.result.trace.append(line)

    def violation(self, message: str) -> None:
        self.result.violations.append(message)
        self.note(f"VIOLATION {message}")

    def pod_name(self, pod: _Pod) -> str:
        return pod.ref.name

    def _in_use(self) -> dict[str, str]:
        return self.target.in_use(self.paths.root)

    def driver_args(self, *, api_url: str | None) -> list[str]:
        selection = self.target.driver_args(self.paths.root)
        at = selection.index("--driver")
        return driver_args(
            self.paths,
            api_url=api_url,
            gpus=self.settings.gpus,
            driver=selection[at + 1],
            extra=[
                *selection[:at],
                *selection[at + 2 :],
                "--no-publish",
                "--device-metadata",
                "--boot-id-file",
                str(self.boot_id_path),
                "--log-level",
                "warning",
            ],
        )

    # ------------------------------------------------------------------ driver

    def _arm_for_start(self) -> str:
        if not self.primary_fired:
            return f"{self.failpoint}@{self.nth}=kill"
        if self.second_chance:
            self.second_chance = False
            if self.rng.random() < self.settings.recovery_crash_chance:
                return f"{self.rng.choice(self.names)}@1=kill"
        return ""

    async def start_driver(self) -> None:
        if self.result.starts >= self.settings.max_starts:
            raise _RunAborted(f"driver started {self.result.starts} times: crash loop")
        self.result.starts += 1
        self.armed = self._arm_for_start()
        self.note(f"start driver{' armed ' + self.armed if self.armed else ''}")
        self.driver.start(env={failpoints.ENV_ARM: self.armed})
        self.running = True
        deadline = time.monotonic() + self.settings.start_within
        while self.plugin is None:
            if not self.driver.alive:
                await self.reap()  # died during recovery
                return
            try:
                self.plugin = await self.kubelet.wait_for_plugin(
                    self.target.driver_name, within=0.5
                )
            except KubeletError:
                if time.monotonic() > deadline:
                    raise _RunAborted(
                        "driver did not register: " + self.driver.log()[-2000:]
                    ) from None
        # Recovery ran before the driver registered, and no call has reached it yet:
        # whatever the crash left must already be repaired, before any kubelet retry.
        await self.audit_node(empty=False, when="after recovery")

    async def reap(self) -> None:
        """The driver is gone: judge how it died and forget the connection."""
        code = await self.driver.wait(within=10)
        self.running = False
        await self.kubelet.close()
        self.plugin = None
        armed, self.armed = self.armed.partition("@")[0], ""
        if self.expect_exit:
            self.expect_exit = False
            return
        if code == KILLED and armed:
            self.result.killed_at.append(armed)
            self.note(f"driver killed at failpoint {armed}")
            if not self.primary_fired:
                self.primary_fired = True
                self.second_chance = True
            return
        self.violation(f"driver exited on its own with {code}: {self.driver.log()[-1500:]}")
        raise _RunAborted("driver died unexpectedly")

    async def ensure_running(self) -> PluginConnection:
        """The kubelet's connection to a live driver, restarting it as often as needed."""
        async with self.lifecycle:
            if self.running and not self.driver.alive:
                await self.reap()
            while self.plugin is None:
                await self.start_driver()
            return self.plugin

    async def after_call_failed(self, exc: grpc.aio.AioRpcError) -> None:
        """A call failed on the transport: the driver died (a failpoint), or it is a bug.

        The process may not be reaped yet when the call fails, so wait for its exit
        instead of asking once; a driver that stays up but unreachable is a violation.
        """
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            self.violation(f"kubelet call failed with {exc.code().name}: {exc.details()}")
            return
        if await self.driver.wait(within=self.settings.exit_within) is None:
            self.violation("driver answered UNAVAILABLE but kept running")

    async def stop_driver(self, *, kill: bool) -> None:
        async with self.lifecycle:
            if not self.running or not self.driver.alive:
                return
            await self._stop_driver(kill=kill)

    async def _stop_driver(self, *, kill: bool) -> None:
        self.expect_exit = True
        self.note("driver SIGKILL" if kill else "driver SIGTERM")
        if kill:
            await self.driver.kill()
        else:
            code = await self.driver.terminate()
            if code not in (0, KILLED):
                self.violation(f"SIGTERM exit code {code}: {self.driver.log()[-1500:]}")
        await self.reap()

    async def reboot(self) -> None:
        """The node reboots: every process dies, the boot ID changes, /var/run/cdi (a
        tmpfs) comes back empty and the kubelet starts with no pod prepared. The next
        start revalidates every prepared claim (an armed failpoint may kill it there)."""
        async with self.lifecycle:
            if self.running and self.driver.alive:
                await self._stop_driver(kill=True)
            self.boots += 1
            self.boot_id_path.write_text(f"boot-{self.boots}\n")
            shutil.rmtree(self.paths.cdi_dir, ignore_errors=True)
            self.note(f"node reboot: boot-{self.boots}, CDI dir emptied")
        for pod in self.pods:
            pod.prepared = False

    # ------------------------------------------------------------------ kubelet moves

    async def prepare(self, pods: Sequence[_Pod]) -> None:
        for pod in pods:
            pod.wanted = True
            pod.in_cache = True  # the kubelet checkpoints before it calls
        plugin = await self.ensure_running()
        names = ",".join(self.pod_name(p) for p in pods)
        try:
            result = await plugin.prepare([p.ref for p in pods])
        except grpc.aio.AioRpcError as exc:
            self.note(f"prepare {names}: {exc.code().name}")
            for pod in pods:
                pod.prepared = False
            await self.after_call_failed(exc)
            return
        for pod in pods:
            entry = result.claims.get(pod.ref.uid)
            if entry is None:
                self.violation(f"prepare {names}: no entry for {pod.ref.name}")
                continue
            pod.last_error = entry.error
            if entry.error:
                continue
            self.check_granted(pod, [d.device_name for d in entry.devices])
        ok = result.kubelet_error == ""
        for pod in pods:
            pod.prepared = ok
        self.note(f"prepare {names}: {'ok' if ok else result.kubelet_error[:160]}")

    def check_granted(self, pod: _Pod, devices: Sequence[str]) -> None:
        if sorted(devices) != sorted(pod.devices):
            self.violation(f"{pod.ref.name} prepared with {devices}, allocated {pod.devices}")
        for other in self.pods:
            if other is pod or other.ref.uid not in self.holds:
                continue
            shared = set(other.devices) & set(pod.devices)
            if shared:
                self.violation(
                    f"{pod.ref.name} was prepared with {sorted(shared)} while "
                    f"{other.ref.name} still holds them"
                )
        in_use = self._in_use()
        for device in pod.devices:
            if in_use.get(device) != pod.ref.uid:
                self.violation(
                    f"{pod.ref.name} prepared but the backend holds {device} for "
                    f"{in_use.get(device)!r}"
                )
        self.holds.add(pod.ref.uid)

    async def unprepare(self, pods: Sequence[_Pod]) -> None:
        for pod in pods:
            pod.wanted = False
            # The pod's containers have stopped before the kubelet unprepares: from now
            # on the device may go to another claim, even if this call fails half-way.
            self.holds.discard(pod.ref.uid)
        targets = [p for p in pods if p.in_cache]
        if not targets:
            return
        plugin = await self.ensure_running()
        names = ",".join(self.pod_name(p) for p in targets)
        try:
            result = await plugin.unprepare([p.ref for p in targets])
        except grpc.aio.AioRpcError as exc:
            self.note(f"unprepare {names}: {exc.code().name}")
            await self.after_call_failed(exc)
            return
        for pod in targets:
            error = result.claims.get(pod.ref.uid)
            if error is None:
                self.violation(f"unprepare {names}: no entry for {pod.ref.name}")
            elif error == "":
                self.holds.discard(pod.ref.uid)
                self.check_gone(pod)
        if result.kubelet_error == "":
            for pod in targets:
                pod.in_cache = False
                pod.prepared = False
        self.note(f"unprepare {names}: {result.kubelet_error[:160] or 'ok'}")

    def check_gone(self, pod: _Pod) -> None:
        uid = pod.ref.uid
        where = f"{pod.ref.name} unprepared successfully but"
        try:
            records = database.read_only_snapshot(
                self.node_settings.store_path, self.node_settings.checkpoint_path
            )
            record = records.checkpoint.claims.get(uid)
        except errors.CheckpointCorruptError as exc:
            self.violation(f"{where} the checkpoint is unreadable: {exc}")
            return
        # A Released record is a finalizer removal owed: the answer follows the local
        # teardown, the removal follows the answer (and a restart or cleanup finishes it).
        owed = record is not None and record.state == "Released"
        if record is not None and not owed:
            self.violation(f"{where} its record is still there ({record.state})")
        if self.specs.exists(uid):
            self.violation(f"{where} its CDI spec is still there")
        if self.metadata.has_any(uid):
            self.violation(f"{where} its device metadata files are still there")
        held = sorted(d for d, holder in self._in_use().items() if holder == uid)
        if held:
            self.violation(f"{where} the backend still holds {held}")
        assert self.cluster is not None
        if not owed and self.finalizer in self.cluster.finalizers(pod.ref):
            self.violation(f"{where} the claim still carries {self.finalizer} with no removal owed")

    async def kubelet_sync(self, *, unprepare_first: bool = False) -> None:
        """One pass of the kubelet's pod workers, in parallel as the kubelet runs them
        (with ``unprepare_first``, deleted pods are all finished before new ones start)."""
        prepares = [self.prepare([p]) for p in self.pods if p.wanted and not p.prepared]
        unprepares = [self.unprepare([p]) for p in self.pods if not p.wanted and p.in_cache]
        await self.ensure_running()
        if unprepare_first:
            await asyncio.gather(*unprepares)
            await asyncio.gather(*prepares)
        else:
            await asyncio.gather(*prepares, *unprepares)

    async def step(self) -> None:
        operation = self.rng.choice(OPERATIONS)
        idle = [p for p in self.pods if not p.prepared]
        wanted = [p for p in self.pods if p.wanted]
        if operation == "prepare" and idle:
            await self.prepare([self.rng.choice(idle)])
        elif operation == "prepare-batch" and len(idle) >= 2:
            # Several claims in one call: their steps share group commits, so a kill
            # at a commit lands between the phases of several claims at once.
            await self.prepare(self.rng.sample(idle, self.rng.randint(2, len(idle))))
        elif operation == "delete-pod" and wanted:
            await self.unprepare([self.rng.choice(wanted)])
        elif operation == "concurrent" and idle and wanted:
            first = self.rng.choice(idle)
            others = [p for p in wanted if p is not first]
            if others:
                await asyncio.gather(
                    self.prepare([first]), self.unprepare([self.rng.choice(others)])
                )
            else:
                await self.prepare([first])
        elif operation == "kubelet-restart":
            self.note("kubelet restart: nothing is marked prepared any more")
            for pod in self.pods:
                pod.prepared = False
        elif operation in ("driver-kill", "driver-term"):
            await self.stop_driver(kill=operation == "driver-kill")
        elif operation == "node-reboot":
            await self.reboot()
        else:
            await self.kubelet_sync()

    # ------------------------------------------------------------------ settle and judge

    async def settle(self) -> None:
        for _ in range(self.settings.settle_rounds):
            await self.kubelet_sync(unprepare_first=True)
        await self.ensure_running()
        for pod in self.pods:
            if not pod.wanted and pod.in_cache:
                self.violation(f"unprepare of {pod.ref.name} kept failing")
            if pod.wanted and not pod.prepared:
                holders = [
                    o.ref.uid
                    for o in self.pods
                    if o is not pod
                    and o.ref.uid in self.holds
                    and set(o.devices) & set(pod.devices)
                ]
                named = any(BUSY_MARKER + uid in pod.last_error for uid in holders)
                if not named:
                    self.violation(
                        f"{pod.ref.name} is wanted but not prepared ({pod.last_error!r}); "
                        f"holders of its devices: {holders}"
                    )

    def temp_leftovers(self) -> list[str]:
        """Temp files of interrupted writes still on the node (a restart sweeps them)."""
        found: list[str] = []
        for top in (self.paths.cdi_dir, self.paths.plugin_dir, self.paths.state_dir):
            for directory, _, names in os.walk(top):
                found += [os.path.join(directory, n) for n in names if fsutil.is_temp_name(n)]
        return sorted(found)

    async def owed_removals_done(self, *, restart: bool) -> None:
        """Give the driver ``OWED_WITHIN`` s for the finalizer removals it owes (Released
        records: answered unprepares whose removal follows the answer), restarting it
        when a failpoint killed it after an answer (its recovery does them, as a
        restarted pod's would); any still owed after that is the audit's to report."""
        deadline = time.monotonic() + OWED_WITHIN
        while time.monotonic() < deadline:
            if restart and self.running and not self.driver.alive:
                await self.ensure_running()
            try:
                records = database.read_only_snapshot(
                    self.node_settings.store_path, self.node_settings.checkpoint_path
                ).checkpoint.claims
            except errors.CheckpointCorruptError:
                return
            if not any(r.state == "Released" for r in records.values()):
                return
            await asyncio.sleep(OWED_POLL)

    async def audit_node(self, *, empty: bool, when: str = "settled") -> None:
        assert self.cluster is not None
        await self.owed_removals_done(restart=when != "after recovery")
        temps = self.temp_leftovers()
        if temps:
            self.violation(f"{when}: temp files of interrupted writes remain: {temps}")
        snapshot = await audit.take_snapshot(
            self.node_settings, backend=self.backend, claims=_ApiClaims(self.cluster.api)
        )
        for finding in audit.find_inconsistencies(snapshot):
            self.violation(f"audit {when}: {finding.kind} {finding.subject}: {finding.message}")
        if snapshot.checkpoint is None:
            return
        # Prepared and still wanted: a deleted pod's claim may be half-way out already.
        prepared = {p.ref.uid for p in self.pods if p.prepared and p.wanted}
        for uid in sorted(prepared):
            record = snapshot.checkpoint.claims.get(uid)
            if record is None or uid not in snapshot.specs:
                self.violation(f"{when}: claim {uid} is prepared for the kubelet, no record/spec")
            elif not self.metadata.present(uid, list(record.device_metadata)):
                self.violation(f"{when}: claim {uid} is prepared, its metadata files are not")
        for uid in sorted(snapshot.specs):
            if uid not in {p.ref.uid for p in self.pods if p.in_cache}:
                self.violation(f"{when}: CDI spec for {uid}, which the kubelet does not know")
        if empty:
            leftovers = {
                "records": sorted(snapshot.checkpoint.claims),
                "specs": sorted(snapshot.specs),
                "device metadata": sorted(snapshot.metadata),
                "devices": sorted((snapshot.in_use or {}).items()),
                "finalizers": sorted(
                    c["metadata"]["name"]
                    for c in snapshot.claims or ()
                    if self.finalizer in (c["metadata"].get("finalizers") or [])
                ),
            }
            for what, items in leftovers.items():
                if items:
                    self.violation(f"after every pod was deleted, {what} remain: {items}")

    async def execute(self) -> None:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.boot_id_path.write_text(f"boot-{self.boots}\n")
        async with ApiServer(kubernetes_version=self.settings.kubernetes_version) as api:
            gpu_names = self.target.setup(self.paths.root, self.settings.gpus)
            self.backend = self.target.backend(self.paths.root)
            self.driver.args = self.driver_args(api_url=api.url)
            self.cluster = ControlPlane(
                api, driver_name=self.target.driver_name, node_name=self.settings.node_name
            )
            self.cluster.add_node()
            for index in range(self.settings.claims):
                devices = tuple(sorted(self.rng.sample(gpu_names, self.rng.choice((1, 1, 2)))))
                ref = self.cluster.allocate_claim(
                    f"claim-{index}", [(f"req{i}", d) for i, d in enumerate(devices)]
                )
                self.pods.append(_Pod(ref=ref, devices=devices))
                self.note(f"claim-{index} uid={ref.uid} devices={list(devices)}")
            try:
                await self.ensure_running()
                for _ in range(self.settings.steps):
                    await self.step()
                await self.settle()
                await self.audit_node(empty=False)
                await self.unprepare([p for p in self.pods])
                for _ in range(self.settings.settle_rounds):
                    if not any(p.in_cache for p in self.pods):
                        break
                    await self.kubelet_sync()
                await self.ensure_running()
                await self.audit_node(empty=True)
            except _RunAborted as exc:
                self.violation(str(exc))
            finally:
                self.expect_exit = True
                await self.driver.terminate()
                await self.kubelet.close()
                self.running = False
        for broken in self.target.violations(self.paths.root):
            self.violation(broken)
        self.result.reached.update(_read_hits(self.hit_log))


class _RunAborted(Exception):
    """The run cannot go on (crash loop, driver never registered)."""


def _read_hits(path: Path) -> collections.Counter[str]:
    try:
        return collections.Counter(path.read_text().split())
    except FileNotFoundError:
        return collections.Counter()


async def run_one(
    settings: CrashSettings, *, seed: int, root: Path, names: Sequence[str] | None = None
) -> RunResult:
    """One seeded kill/restart run under ``root/run-<seed>``."""
    run = _Run(
        settings,
        seed=seed,
        names=names if names is not None else declared_failpoints(),
        root=root / f"run-{seed}",
    )
    started = time.perf_counter()
    try:
        await run.execute()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        run.violation(f"harness error {type(exc).__name__}: {exc}")
    run.result.seconds = time.perf_counter() - started
    if not run.result.violations and not settings.keep_passing_runs:
        shutil.rmtree(run.paths.root, ignore_errors=True)
    return run.result


async def run_many(
    settings: CrashSettings,
    *,
    root: Path,
    progress: Callable[[RunResult], None] | None = None,
) -> CrashReport:
    """``settings.runs`` runs, ``settings.concurrency`` at a time, in this event loop."""
    names = declared_failpoints()
    gate = asyncio.Semaphore(settings.concurrency)
    results: list[RunResult] = []
    started = time.perf_counter()

    async def one(seed: int) -> None:
        async with gate:
            result = await run_one(settings, seed=seed, root=root, names=names)
        results.append(result)
        if progress is not None:
            progress(result)

    async with asyncio.TaskGroup() as group:
        for index in range(settings.runs):
            group.create_task(one(settings.base_seed + index), name=f"crash-run-{index}")
    results.sort(key=lambda r: r.seed)
    with contextlib.suppress(OSError):
        os.rmdir(root)  # empty when every run passed
    return CrashReport(
        settings=settings, results=results, known=names, seconds=time.perf_counter() - started
    )
