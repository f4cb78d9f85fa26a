"""Runs the conformance cases against one plugin through the kubelet emulator.

``run_suite`` finds the plugin's registration socket (given, or watched for in a
registry directory), checks what a kubelet checks at registration, then, for each
kubelet version targeted, registers as that kubelet would (service choice included),
prepares and unprepares ResourceClaims a ``ClaimFactory`` created in the API, and judges
every answer. A plugin that never registers, or a suite with no devices to allocate,
is a ``SetupError``: there is nothing to judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from dralet import kubelet as emulator
from dralet import releases
from dralet.conformance import checks
from dralet.conformance.cases import CASE_NAMES, CASES
from dralet.conformance.cdifiles import SpecWatch
from dralet.conformance.claims import ClaimFactory
from dralet.conformance.report import CaseResult, Status, SuiteResult
from dralet.protocol.proto import pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc

__all__ = [
    "KUBELET_VERSIONS",
    "ConformanceSettings",
    "SetupError",
    "kubelet_service",
    "run_suite",
]

T = TypeVar("T")
KUBELET_VERSIONS = releases.KUBERNETES_RELEASES
NAME_PREFIX = "dralet-conformance"
TOKEN_BYTES = 3
DISCOVERY_POLL_INTERVAL = 0.01
PUBLISHED_POLL_INTERVAL = 0.2
HEALTH_FIRST_MESSAGE = 10.0


@dataclass(frozen=True)
class ConformanceSettings:
    """What to check and where."""

    registration_socket: Path | None = None
    """The plugin's registration socket; or watch ``registry_dir`` for it."""
    registry_dir: Path | None = None
    driver_name: str = ""
    """The expected driver name ('' = whatever GetInfo says)."""
    cdi_dir: Path = Path("/var/run/cdi")
    node_name: str = "node-a"
    pool: str = ""
    """The devices' pool ('' = the published slice's pool, or the node name)."""
    devices: tuple[str, ...] = ()
    """Devices to allocate ('' = the first two the driver published for the node)."""
    namespace: str = "default"
    kubelet_versions: tuple[str, ...] = ()
    """Kubelets to play ('' = every version the driver's GetInfo makes usable)."""
    restart: Callable[[], Awaitable[None]] | None = None
    """Restarts the driver (returns once the old process is gone); None skips restart cases."""
    progress: Callable[[str], None] | None = None
    """Told what the suite is waiting for."""
    discovery_timeout: float = 30.0
    call_timeout: float = emulator.CALL_TIMEOUT
    deadline_fraction: float = 0.5
    """A call answered after this fraction of ``call_timeout`` fails ``deadline``."""
    strict: bool = False


class SetupError(Exception):
    """The suite cannot run: no plugin registered, or no devices to allocate."""


def kubelet_service(advertised: Sequence[str], version: str) -> tuple[str, str]:
    """(the DRA service a ``version`` kubelet would call, '') or ('', why it cannot)."""
    try:
        service = emulator.choose_service(advertised, kubelet_version=version)
    except emulator.KubeletError as exc:
        return "", f"a {version} kubelet refuses this driver: {exc}"
    if service == emulator.V1ALPHA4:
        return "", (
            f"a {version} kubelet would fall back to {emulator.V1ALPHA4} (no "
            f"{emulator.V1BETA1} advertised), which conformance does not speak"
        )
    return service, ""


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


async def _get_info(path: Path) -> pluginregistration_v1_pb2.PluginInfo:
    async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        info: pluginregistration_v1_pb2.PluginInfo = await stub.GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=emulator.GET_INFO_TIMEOUT
        )
        return info


@dataclass(frozen=True)
class Discovered:
    socket: Path
    info: pluginregistration_v1_pb2.PluginInfo
    endpoint_listening: bool


async def discover(settings: ConformanceSettings) -> Discovered:
    """The first registration socket whose GetInfo answers (for the expected driver)."""
    where = settings.registration_socket or settings.registry_dir
    deadline = time.monotonic() + settings.discovery_timeout
    last = "no registration socket appeared"
    while time.monotonic() < deadline:
        if settings.registration_socket is not None:
            paths = [settings.registration_socket] if settings.registration_socket.exists() else []
        else:
            assert settings.registry_dir is not None
            paths = emulator.KubeletEmulator(settings.registry_dir).sockets()
        for path in paths:
            try:
                info = await _get_info(path)
            except grpc.aio.AioRpcError as exc:
                last = f"GetInfo on {path} failed: {exc.code().name} {exc.details()}"
                continue
            # The kubelet may dial the endpoint right after GetInfo: probe it at once.
            listening = _listening(info.endpoint or str(path))
            wrong = bool(settings.driver_name) and info.name != settings.driver_name
            if wrong and settings.registration_socket is None:
                last = f"{path} belongs to driver {info.name!r}"
                continue
            return Discovered(path, info, listening)
        await asyncio.sleep(DISCOVERY_POLL_INTERVAL)
    driver = f"driver {settings.driver_name}" if settings.driver_name else "no driver"
    raise SetupError(
        f"{driver} registered at {where} within {settings.discovery_timeout:g}s ({last})"
    )


class Run:
    """One run of the suite: results, the claims it made, the current kubelet round."""

    def __init__(self, settings: ConformanceSettings, claims: ClaimFactory) -> None:
        self.settings = settings
        self.factory = claims
        self.results: dict[tuple[str, str], CaseResult] = {}
        self.calls: list[tuple[str, float]] = []
        self.created: list[emulator.KubeletClaim] = []
        self.driver = settings.driver_name
        self.pool = settings.pool or settings.node_name
        self.devices: tuple[str, ...] = settings.devices
        self.published: tuple[str, ...] = ()
        self.found: Discovered | None = None
        self.kubelet = ""
        self.plugin: emulator.PluginConnection | None = None
        self.watch: SpecWatch | None = None
        self.unwatched = ""
        self.case_started = time.monotonic()

    def say(self, message: str) -> None:
        if self.settings.progress is not None:
            self.settings.progress(message)

    def record(self, name: str, status: Status, message: str = "") -> None:
        scope = "" if name.startswith("registration.") else self.kubelet
        if (name, scope) not in self.results:
            elapsed = time.monotonic() - self.case_started
            self.results[name, scope] = CaseResult(name, status, message, elapsed, scope)

    def verdict(self, name: str, problems: Sequence[str], ok: str) -> None:
        if problems:
            self.record(name, "fail", "; ".join(problems))
        else:
            self.record(name, "pass", ok)

    async def timed(self, what: str, call: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            return await call
        finally:
            self.calls.append((what, time.monotonic() - started))
            if self.watch is not None:
                self.watch.drain()

    async def claim(self, slug: str, devices: Sequence[str]) -> emulator.KubeletClaim:
        name = f"{NAME_PREFIX}-{slug}-{secrets.token_hex(TOKEN_BYTES)}"
        ref = await self.factory.create(name, devices=devices, driver=self.driver, pool=self.pool)
        self.created.append(ref)
        return ref

    def missing_claim(self) -> emulator.KubeletClaim:
        """A claim the kubelet names but that does not exist in the API."""
        name = f"{NAME_PREFIX}-missing-{secrets.token_hex(TOKEN_BYTES)}"
        return emulator.KubeletClaim(self.settings.namespace, str(uuid.uuid4()), name)

    @property
    def dra(self) -> emulator.PluginConnection:
        assert self.plugin is not None
        return self.plugin

    async def prepare(self, claims: Sequence[emulator.KubeletClaim]) -> emulator.PrepareResult:
        return await self.timed("NodePrepareResources", self.dra.prepare(claims))

    async def unprepare(self, claims: Sequence[emulator.KubeletClaim]) -> emulator.UnprepareResult:
        return await self.timed("NodeUnprepareResources", self.dra.unprepare(claims))

    async def register(self) -> emulator.PluginConnection:
        assert self.found is not None
        kubelet = emulator.KubeletEmulator(
            self.found.socket.parent,
            kubelet_version=self.kubelet,
            call_timeout=self.settings.call_timeout,
        )
        return await kubelet.register(self.found.socket)

    async def restart(self) -> None:
        """Restart the driver, wait for it to register again and register as this kubelet."""
        assert self.settings.restart is not None
        if self.plugin is not None:
            await self.plugin.close()
            self.plugin = None
        await self.settings.restart()
        self.say(f"waiting for driver {self.driver} to register again after the restart")
        self.found = await discover(self.settings)
        self.plugin = await self.register()

    async def resolve_devices(self) -> None:
        if self.devices:
            return
        wait = self.settings.discovery_timeout
        self.say(
            f"waiting up to {wait:g}s for driver {self.driver} to publish its devices "
            f"for node {self.settings.node_name} (or give --device)"
        )
        deadline = time.monotonic() + wait
        while True:
            published = await self.factory.published(self.driver, self.settings.node_name)
            if published is not None:
                self.published = published.devices
                self.devices = published.devices[:2]
                self.pool = self.settings.pool or published.pool or self.pool
                return
            if time.monotonic() >= deadline:
                raise SetupError(
                    f"driver {self.driver} published no ResourceSlice with devices for node "
                    f"{self.settings.node_name} within {wait:g}s: give the devices with --device"
                )
            await asyncio.sleep(PUBLISHED_POLL_INTERVAL)

    async def cleanup(self) -> None:
        """Unprepare and delete every claim the suite created; errors do not count."""
        for ref in self.created:
            with contextlib.suppress(Exception):
                if self.plugin is not None:
                    await self.dra.unprepare_raw([ref])
            with contextlib.suppress(Exception):
                await self.factory.delete(ref)
        self.created.clear()


async def _run_case(run: Run, name: str, body: Callable[[Run], Awaitable[None]]) -> None:
    """Run a case; an unexpected gRPC or API failure fails it instead of the suite."""
    run.case_started = time.monotonic()
    try:
        await body(run)
    except asyncio.CancelledError:
        raise
    except SetupError as exc:
        run.record(name, "fail", str(exc))
    except grpc.aio.AioRpcError as exc:
        run.record(name, "fail", checks.rpc_error(exc))
    except Exception as exc:  # noqa: BLE001 - any failure of one case is that case's verdict
        run.record(name, "fail", f"{type(exc).__name__}: {exc}")


def _skip_round(run: Run, reason: str) -> None:
    for c in CASES:
        if c.scope == "kubelet":
            run.record(c.name, "skip", reason)


async def _round(run: Run, version: str, service: str, skip_reason: str) -> None:
    run.kubelet = version
    run.calls = []
    if not service:
        _skip_round(run, skip_reason)
        return
    run.say(f"kubelet {version}: running the cases on {service}")
    run.case_started = time.monotonic()
    await _run_case(run, "kubelet.service", checks.check_service)
    if run.plugin is None:
        _skip_round(run, "not run: the kubelet could not register the driver")
        return
    await _run_case(run, "kubelet.health-watch", checks.check_health_watch)
    watch = SpecWatch(run.settings.cdi_dir)
    run.watch = watch if watch.start() else None
    run.unwatched = watch.unwatched
    try:
        for name, body in checks.STEPS:
            await _run_case(run, name, body)
        for name in CASE_NAMES:
            if name not in ("deadline", "cdi.atomic-write") and (name, version) not in run.results:
                if name.startswith("registration."):
                    continue
                run.record(name, "fail", "not reached: an earlier step of its scenario failed")
        run.case_started = time.monotonic()
        checks.check_deadline(run)
    finally:
        await run.cleanup()
        run.case_started = time.monotonic()
        checks.check_atomic_write(run)
        watch.close()
        run.watch = None
        if run.plugin is not None:
            await run.plugin.close()
            run.plugin = None


async def run_suite(settings: ConformanceSettings, *, claims: ClaimFactory) -> SuiteResult:
    """Every case in ``CASES`` for each kubelet targeted; ``SetupError`` if none can run."""
    if (settings.registration_socket is None) == (settings.registry_dir is None):
        raise ValueError("give exactly one of registration_socket and registry_dir")
    run = Run(settings, claims)
    where = settings.registration_socket or settings.registry_dir
    run.say(f"waiting up to {settings.discovery_timeout:g}s for a driver to register at {where}")
    run.found = found = await discover(settings)
    run.driver = settings.driver_name or found.info.name
    run.case_started = time.monotonic()
    checks.check_info(run, found)
    advertised = list(found.info.supported_versions)
    targets = settings.kubelet_versions or tuple(
        v for v in KUBELET_VERSIONS if kubelet_service(advertised, v)[0]
    )
    services: list[tuple[str, str]] = []
    if targets:
        await run.resolve_devices()
    try:
        for version in targets:
            service, reason = kubelet_service(advertised, version)
            await _round(run, version, service, reason)
            if service:
                services.append((version, service))
    finally:
        await run.cleanup()
    order = {name: i for i, name in enumerate(CASE_NAMES)}
    kubelets = {v: i for i, v in enumerate(("", *targets))}
    cases = sorted(run.results.values(), key=lambda c: (kubelets[c.kubelet], order[c.name]))
    return SuiteResult(
        cases=tuple(cases),
        driver=run.driver,
        endpoint=found.info.endpoint,
        services=tuple(services),
        strict=settings.strict,
        devices=run.devices,
        published=run.published,
    )
