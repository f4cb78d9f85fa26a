"""Conformance cases for any DRA kubelet plugin (Go or Python), played through the kubelet
emulator over the real protocol.

``run_suite`` finds the plugin's registration socket (given, or watched for in a
registry directory), checks what a kubelet checks at registration, picks the DRA
service as 1.32 and 1.34 kubelets do, then prepares and unprepares ResourceClaims that a
``ClaimFactory`` created in the API (``ApiClaimFactory``: through ``dralet.kube``, for
the API stand-in or a real cluster) and judges every answer as the kubelet would. Each
named case passes, fails or is skipped with a one-line reason. ``SuiteResult`` renders
as JSON and as JUnit XML for CI systems. Used by ``dralet conformance`` and the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from xml.etree import ElementTree

import grpc
import yaml

from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.kube import resources, versions
from dralet.kube.client import KubeClient
from dralet.protocol.proto import pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc
from dralet.testing import cluster
from dralet.testing import kubelet as emulator

__all__ = [
    "CASES",
    "ApiClaimFactory",
    "CaseResult",
    "ClaimFactory",
    "ConformanceSettings",
    "SuiteResult",
    "run_suite",
]

T = TypeVar("T")
Status = Literal["pass", "fail", "skip"]

CASES: tuple[tuple[str, str], ...] = (
    ("registration.order", "the DRA endpoint listens when GetInfo first answers"),
    ("registration.type", 'GetInfo type is "DRAPlugin"'),
    ("registration.name", "GetInfo name is the driver name"),
    ("registration.endpoint", "GetInfo endpoint is an absolute path to the DRA socket"),
    ("registration.versions", "v1.DRAPlugin and/or v1beta1.DRAPlugin advertised, v1 first"),
    ("version.kubelet-1.32", "a 1.32 kubelet picks v1beta1.DRAPlugin and the service answers"),
    ("version.kubelet-1.34", "a 1.34 kubelet finds a service it speaks and the service answers"),
    ("invalid-argument.empty-uid", "a claim with an empty UID is InvalidArgument"),
    ("unprepare.unknown-claim", "unprepare of a claim never prepared is OK, with an entry"),
    ("prepare.one-entry-per-claim", "one response entry per requested claim, no other"),
    ("prepare.twice", "preparing a claim again returns the same CDI devices"),
    ("prepare.per-claim-error", "one bad claim gets its own error; the call and others succeed"),
    ("cdi.qualified-ids", "CDI device ids are fully qualified (vendor/class=name)"),
    ("cdi.resolvable", "each CDI id is defined by a valid spec file in the CDI directory"),
    ("cdi.spec-removed", "after unprepare no spec file defines the claim's CDI devices"),
    ("unprepare.twice", "unpreparing a claim twice is OK both times"),
    ("deadline", "every call is answered well within the kubelet's 45 s deadline"),
)
CASE_NAMES = tuple(name for name, _ in CASES)

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
NOT_SERVED = frozenset({grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAVAILABLE})
NAME_PREFIX = "dralet-conformance"
TOKEN_BYTES = 3
DISCOVERY_POLL_INTERVAL = 0.01
KUBELET_132 = "1.32"
KUBELET_134 = "1.34"


@dataclass(frozen=True)
class ConformanceSettings:
    """What to check and where."""

    registration_socket: Path | None = None
    """The plugin's registration socket; or watch ``registry_dir`` for it."""
    registry_dir: Path | None = None
    """A directory to watch for the registration socket, as the kubelet does."""
    driver_name: str = ""
    """The expected driver name ('' = whatever GetInfo says)."""
    cdi_dir: Path = Path("/var/run/cdi")
    """Where the driver's CDI spec files must be."""
    node_name: str = "node-a"
    """The node the claims are allocated on."""
    pool: str = ""
    """The ResourceSlice pool of the devices ('' = the node name)."""
    devices: tuple[str, ...] = ("gpu-0", "gpu-1")
    """Device names in ``pool`` to allocate (two let one call carry two good claims)."""
    namespace: str = "default"
    """Namespace of the ResourceClaims the suite creates."""
    kubelet_version: str = KUBELET_134
    """The kubelet whose service choice the DRA cases use."""
    discovery_timeout: float = 30.0
    """Seconds to wait for the registration socket and a first GetInfo answer."""
    call_timeout: float = emulator.CALL_TIMEOUT
    """The kubelet's deadline for each prepare/unprepare call."""
    deadline_fraction: float = 0.5
    """A call answered after this fraction of ``call_timeout`` fails ``deadline``."""

    @property
    def pool_name(self) -> str:
        return self.pool or self.node_name


@dataclass(frozen=True)
class CaseResult:
    name: str
    status: Status
    message: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class SuiteResult:
    cases: tuple[CaseResult, ...]
    driver: str = ""
    endpoint: str = ""
    service: str = ""
    """The DRA service the DRA cases used."""

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.cases)

    def failed(self) -> list[str]:
        return [c.name for c in self.cases if c.status == "fail"]

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "endpoint": self.endpoint,
            "service": self.service,
            "passed": self.passed,
            "cases": [
                {
                    "name": c.name,
                    "status": c.status,
                    "message": c.message,
                    "seconds": round(c.seconds, 3),
                }
                for c in self.cases
            ],
        }

    def to_junit_xml(self) -> str:
        """JUnit XML (one testsuite, one testcase per case) for CI systems."""
        suite = ElementTree.Element(
            "testsuite",
            name="dralet-conformance",
            tests=str(len(self.cases)),
            failures=str(sum(1 for c in self.cases if c.status == "fail")),
            skipped=str(sum(1 for c in self.cases if c.status == "skip")),
            errors="0",
            time=f"{sum(c.seconds for c in self.cases):.3f}",
        )
        properties = ElementTree.SubElement(suite, "properties")
        for key, value in (("driver", self.driver), ("endpoint", self.endpoint)):
            ElementTree.SubElement(properties, "property", name=key, value=value)
        ElementTree.SubElement(properties, "property", name="service", value=self.service)
        for c in self.cases:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"dralet.conformance.{self.driver or 'driver'}",
                name=c.name,
                time=f"{c.seconds:.3f}",
            )
            if c.status == "fail":
                ElementTree.SubElement(case, "failure", message=c.message).text = c.message
            elif c.status == "skip":
                ElementTree.SubElement(case, "skipped", message=c.message)
        root = ElementTree.Element("testsuites")
        root.append(suite)
        ElementTree.indent(root)
        return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


class ClaimFactory(Protocol):
    """Creates ResourceClaims allocated and reserved as the scheduler would leave them."""

    async def create(
        self, name: str, *, devices: Sequence[str], driver: str
    ) -> emulator.KubeletClaim: ...

    async def delete(self, claim: emulator.KubeletClaim) -> None: ...


@dataclass
class ApiClaimFactory:
    """``ClaimFactory`` on the API server through ``dralet.kube`` (stand-in or cluster)."""

    client: KubeClient
    node_name: str
    pool: str
    namespace: str = "default"
    device_class: str = "dralet-conformance"
    """Named in the requests; the suite never schedules, so it need not exist."""
    _version: str = field(default="", repr=False)

    async def _resource(self) -> resources.Resource:
        if not self._version:
            self._version = await versions.negotiate_resource_version(self.client)
        return resources.resource_claims(self._version)

    async def create(
        self, name: str, *, devices: Sequence[str], driver: str
    ) -> emulator.KubeletClaim:
        resource = await self._resource()
        requests = [f"r{i}" for i in range(len(devices))]
        created = await self.client.create(
            resource,
            cluster.claim_manifest(
                name,
                namespace=self.namespace,
                version=self._version,
                requests=requests,
                device_class=self.device_class,
            ),
            namespace=self.namespace,
        )
        results = [
            {"request": r, "driver": driver, "pool": self.pool, "device": d}
            for r, d in zip(requests, devices, strict=True)
        ]
        status = cluster.allocated_status(results, node_name=self.node_name, pod_name=f"{name}-pod")
        await self.client.merge_patch(
            resource, name, {"status": status}, namespace=self.namespace, subresource="status"
        )
        return emulator.KubeletClaim(self.namespace, created["metadata"]["uid"], name)

    async def delete(self, claim: emulator.KubeletClaim) -> None:
        await self.client.delete(await self._resource(), claim.name, namespace=claim.namespace)


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _candidates(settings: ConformanceSettings) -> list[Path]:
    if settings.registration_socket is not None:
        path = settings.registration_socket
        return [path] if path.exists() else []
    assert settings.registry_dir is not None
    return emulator.KubeletEmulator(settings.registry_dir).sockets()


async def _get_info(path: Path) -> pluginregistration_v1_pb2.PluginInfo:
    async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        info: pluginregistration_v1_pb2.PluginInfo = await stub.GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=emulator.GET_INFO_TIMEOUT
        )
        return info


@dataclass(frozen=True)
class _Discovered:
    socket: Path
    info: pluginregistration_v1_pb2.PluginInfo
    endpoint_listening: bool


async def _discover(settings: ConformanceSettings) -> _Discovered:
    """The first registration socket whose GetInfo answers (for the expected driver)."""
    deadline = time.monotonic() + settings.discovery_timeout
    last = "no registration socket appeared"
    while time.monotonic() < deadline:
        for path in _candidates(settings):
            try:
                info = await _get_info(path)
            except grpc.aio.AioRpcError as exc:
                last = f"GetInfo on {path} failed: {exc.code().name} {exc.details()}"
                continue
            # The kubelet may dial the endpoint right after GetInfo: probe it at once.
            listening = _listening(info.endpoint or str(path))
            wrong_driver = bool(settings.driver_name) and info.name != settings.driver_name
            if wrong_driver and settings.registration_socket is None:
                last = f"{path} belongs to driver {info.name!r}"
                continue
            return _Discovered(path, info, listening)
        await asyncio.sleep(DISCOVERY_POLL_INTERVAL)
    where = settings.registration_socket or settings.registry_dir
    raise emulator.KubeletError(
        f"no plugin registered at {where} within {settings.discovery_timeout}s: {last}"
    )


def _rpc_error(exc: grpc.aio.AioRpcError) -> str:
    return f"gRPC error {exc.code().name}: {exc.details()}"


class _Run:
    """One run of the suite against one plugin."""

    def __init__(self, settings: ConformanceSettings, claims: ClaimFactory) -> None:
        self.settings = settings
        self.factory = claims
        self.results: dict[str, CaseResult] = {}
        self.calls: list[tuple[str, float]] = []
        self.created: list[emulator.KubeletClaim] = []
        self.driver = settings.driver_name
        self.plugin: emulator.PluginConnection | None = None
        self.connections: list[emulator.PluginConnection] = []
        self.case_started = time.monotonic()

    def record(self, name: str, status: Status, message: str = "", seconds: float = 0.0) -> None:
        if name not in self.results:
            elapsed = seconds or time.monotonic() - self.case_started
            self.results[name] = CaseResult(name, status, message, elapsed)

    async def timed(self, what: str, call: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            return await call
        finally:
            self.calls.append((what, time.monotonic() - started))

    async def claim(self, slug: str, devices: Sequence[str]) -> emulator.KubeletClaim:
        name = f"{NAME_PREFIX}-{slug}-{secrets.token_hex(TOKEN_BYTES)}"
        ref = await self.factory.create(name, devices=devices, driver=self.driver)
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

    # ------------------------------------------------------------------ registration

    def check_info(self, found: _Discovered) -> None:
        info = found.info
        if found.endpoint_listening:
            self.record("registration.order", "pass", f"{info.endpoint} listened at GetInfo")
        else:
            self.record(
                "registration.order",
                "fail",
                f"GetInfo answered but nothing listens on {info.endpoint or found.socket} yet; "
                "the kubelet may call it at once",
            )
        if info.type == emulator.DRA_PLUGIN_TYPE:
            self.record("registration.type", "pass", info.type)
        else:
            self.record("registration.type", "fail", f"type {info.type!r}, not 'DRAPlugin'")
        if not info.name:
            self.record("registration.name", "fail", "GetInfo name is empty")
        elif self.settings.driver_name and info.name != self.settings.driver_name:
            self.record(
                "registration.name", "fail", f"{info.name!r}, not {self.settings.driver_name!r}"
            )
        else:
            self.record("registration.name", "pass", info.name)
        endpoint = info.endpoint
        if not endpoint:
            self.record(
                "registration.endpoint",
                "fail",
                "empty: the kubelet would dial the registration socket instead",
            )
        elif not Path(endpoint).is_absolute():
            self.record("registration.endpoint", "fail", f"{endpoint!r} is not an absolute path")
        else:
            self.record("registration.endpoint", "pass", endpoint)
        advertised = list(info.supported_versions)
        ours = [v for v in advertised if v in emulator.KUBELET_134_SERVICES]
        if not ours:
            self.record(
                "registration.versions",
                "fail",
                f"{advertised} has neither {emulator.V1} nor {emulator.V1BETA1}",
            )
        elif len(ours) == len(emulator.KUBELET_134_SERVICES) and ours[0] != emulator.V1:
            self.record(
                "registration.versions",
                "fail",
                f"{advertised}: {emulator.V1} must come first (1.34+ kubelets take the first)",
            )
        else:
            self.record("registration.versions", "pass", ", ".join(advertised))

    async def check_version(self, socket_path: Path, kubelet_version: str) -> None:
        name = f"version.kubelet-{kubelet_version}"
        kubelet = emulator.KubeletEmulator(
            socket_path.parent,
            kubelet_version=kubelet_version,
            call_timeout=self.settings.call_timeout,
        )
        try:
            plugin = await kubelet.register(socket_path)
        except (grpc.aio.AioRpcError, emulator.KubeletError) as exc:
            self.record(name, "fail", f"registration failed: {exc}")
            return
        self.connections.append(plugin)
        if kubelet_version == self.settings.kubelet_version:
            self.plugin = plugin
        if kubelet_version == KUBELET_132 and plugin.service != emulator.V1BETA1:
            self.record(name, "fail", f"picks {plugin.service}, which dralet cannot call")
            return
        try:
            await self.timed("NodeUnprepareResources", plugin.unprepare_raw([]))
        except grpc.aio.AioRpcError as exc:
            if exc.code() in NOT_SERVED:
                self.record(name, "fail", f"picks {plugin.service}, but {_rpc_error(exc)}")
                return
        self.record(name, "pass", f"picks {plugin.service}")

    # ------------------------------------------------------------------ DRA cases

    async def check_invalid_argument(self) -> None:
        name = "invalid-argument.empty-uid"
        bad = emulator.KubeletClaim(self.settings.namespace, "", f"{NAME_PREFIX}-empty-uid")
        problems: list[str] = []
        for what, call in (
            ("NodePrepareResources", self.dra.prepare_raw),
            ("NodeUnprepareResources", self.dra.unprepare_raw),
        ):
            try:
                await self.timed(what, call([bad]))
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    problems.append(f"{what}: {_rpc_error(exc)}")
                continue
            problems.append(f"{what} accepted a claim with an empty UID")
        self._verdict(name, problems, "InvalidArgument from both calls")

    def _verdict(self, name: str, problems: Sequence[str], ok: str) -> None:
        if problems:
            self.record(name, "fail", "; ".join(problems))
        else:
            self.record(name, "pass", ok)

    async def check_unprepare_unknown(self) -> None:
        unknown = self.missing_claim()
        result = await self.unprepare([unknown])
        if result.kubelet_error:
            self.record("unprepare.unknown-claim", "fail", result.kubelet_error)
        else:
            self.record("unprepare.unknown-claim", "pass", "OK with an entry")

    async def check_one_entry_per_claim(self) -> None:
        name = "prepare.one-entry-per-claim"
        devices = self.settings.devices
        first = await self.claim("entries", devices[:1])
        second = (
            await self.claim("entries", devices[1:2]) if len(devices) > 1 else self.missing_claim()
        )
        result = await self.prepare([first, second])
        keys = set(result.claims)
        expected = {first.uid, second.uid}
        problems = []
        if keys - expected:
            problems.append(f"entries for claims not asked for: {sorted(keys - expected)}")
        if expected - keys:
            problems.append(f"no entry for {sorted(expected - keys)}")
        if len(devices) > 1 and result.kubelet_error:
            problems.append(result.kubelet_error)
        self._verdict(name, problems, f"{len(keys)} entries for {len(expected)} claims")
        await self.unprepare([first, second])

    async def check_prepare_twice(self) -> None:
        name = "prepare.twice"
        ref = await self.claim("twice", self.settings.devices[:1])
        first = await self.prepare([ref])
        if first.kubelet_error:
            self.record(name, "fail", f"first prepare: {first.kubelet_error}")
            return
        again = await self.prepare([ref])
        if again.kubelet_error:
            self.record(name, "fail", f"second prepare: {again.kubelet_error}")
        elif sorted(again.cdi_ids(ref.uid)) != sorted(first.cdi_ids(ref.uid)):
            self.record(
                name,
                "fail",
                f"CDI ids changed: {first.cdi_ids(ref.uid)} then {again.cdi_ids(ref.uid)}",
            )
        else:
            self.record(name, "pass", "same CDI ids " + ", ".join(first.cdi_ids(ref.uid)))
        await self.unprepare([ref])

    async def check_per_claim_error(self) -> None:
        name = "prepare.per-claim-error"
        good = await self.claim("good", self.settings.devices[:1])
        bad = self.missing_claim()
        try:
            result = await self.prepare([good, bad])
        except grpc.aio.AioRpcError as exc:
            self.record(
                name,
                "fail",
                f"{_rpc_error(exc)}: the whole call failed for one claim missing from the API",
            )
            await self.unprepare([good])
            return
        problems = []
        if bad.uid not in result.claims:
            problems.append("no entry for the missing claim")
        elif not result.claims[bad.uid].error:
            problems.append("the missing claim has no error")
        if good.uid not in result.claims:
            problems.append("no entry for the good claim")
        elif result.claims[good.uid].error:
            problems.append(f"the good claim failed too: {result.claims[good.uid].error}")
        self._verdict(name, problems, "only the missing claim has an error")
        await self.unprepare([good])

    async def check_cdi(self) -> None:
        ref = await self.claim("cdi", self.settings.devices[:1])
        result = await self.prepare([ref])
        if result.kubelet_error:
            for name in ("cdi.qualified-ids", "cdi.resolvable", "cdi.spec-removed"):
                self.record(name, "fail", f"prepare failed: {result.kubelet_error}")
            return
        ids = result.cdi_ids(ref.uid)
        if not ids:
            for name in ("cdi.qualified-ids", "cdi.resolvable", "cdi.spec-removed"):
                self.record(name, "skip", "the driver returned no CDI device ids")
            await self.unprepare([ref])
            return
        bad = []
        for device_id in ids:
            try:
                cdi_names.parse_qualified_name(device_id)
            except cdi_names.CDINameError as exc:
                bad.append(str(exc))
        self._verdict("cdi.qualified-ids", bad, ", ".join(ids))
        defined = _defined_devices(self.settings.cdi_dir)
        unresolved = [i for i in ids if i not in defined]
        if unresolved:
            self.record(
                "cdi.resolvable",
                "fail",
                f"no valid spec in {self.settings.cdi_dir} defines {', '.join(unresolved)}",
            )
        else:
            files = sorted({defined[i].name for i in ids})
            self.record("cdi.resolvable", "pass", f"defined in {', '.join(files)}")
        unprepared = await self.unprepare([ref])
        resolved = [i for i in ids if i in defined]
        if unprepared.kubelet_error:
            self.record("cdi.spec-removed", "fail", f"unprepare: {unprepared.kubelet_error}")
        elif not resolved:
            self.record("cdi.spec-removed", "skip", "no spec file defined the claim's devices")
        else:
            remaining = _defined_devices(self.settings.cdi_dir)
            left = sorted({remaining[i].name for i in resolved if i in remaining})
            if left:
                self.record("cdi.spec-removed", "fail", f"still defined by {', '.join(left)}")
            else:
                self.record("cdi.spec-removed", "pass", "spec files gone")

    async def check_unprepare_twice(self) -> None:
        name = "unprepare.twice"
        ref = await self.claim("unprepare", self.settings.devices[:1])
        prepared = await self.prepare([ref])
        if prepared.kubelet_error:
            self.record(name, "fail", f"prepare: {prepared.kubelet_error}")
            return
        problems = []
        for attempt in ("first", "second"):
            try:
                result = await self.unprepare([ref])
            except grpc.aio.AioRpcError as exc:
                problems.append(f"{attempt} unprepare: {_rpc_error(exc)}")
                continue
            if result.kubelet_error:
                problems.append(f"{attempt} unprepare: {result.kubelet_error}")
        self._verdict(name, problems, "OK both times")

    def check_deadline(self) -> None:
        limit = self.settings.call_timeout * self.settings.deadline_fraction
        if not self.calls:
            self.record("deadline", "skip", "no call was made")
            return
        what, slowest = max(self.calls, key=lambda c: c[1])
        summary = f"slowest of {len(self.calls)} calls: {what} in {slowest:.3f}s"
        if slowest > limit:
            self.record("deadline", "fail", f"{summary} (limit {limit:.1f}s)")
        else:
            self.record("deadline", "pass", summary)

    async def cleanup(self) -> None:
        """Unprepare and delete every claim the suite created; errors do not count."""
        for ref in self.created:
            with contextlib.suppress(Exception):
                if self.plugin is not None:
                    await self.dra.unprepare_raw([ref])
            with contextlib.suppress(Exception):
                await self.factory.delete(ref)
        for connection in self.connections:
            await connection.close()


def _defined_devices(cdi_dir: Path) -> dict[str, Path]:
    """Qualified CDI device name → the valid spec file in ``cdi_dir`` that defines it."""
    defined: dict[str, Path] = {}
    try:
        paths = sorted(p for p in cdi_dir.iterdir() if p.suffix in SPEC_SUFFIXES)
    except FileNotFoundError:
        return defined
    for path in paths:
        try:
            text = path.read_text()
            document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            spec = cdi_spec.from_json(document)
        except (OSError, ValueError, yaml.YAMLError, TypeError, AttributeError):
            continue  # a runtime skips specs it cannot parse, too
        for qualified in spec.qualified_names():
            defined.setdefault(qualified, path)
    return defined


async def _run_case(run: _Run, name: str, body: Callable[[], Awaitable[None]]) -> None:
    """Run a case; an unexpected gRPC or API failure fails it instead of the suite."""
    run.case_started = time.monotonic()
    try:
        await body()
    except asyncio.CancelledError:
        raise
    except grpc.aio.AioRpcError as exc:
        run.record(name, "fail", _rpc_error(exc))
    except Exception as exc:  # noqa: BLE001 - any failure of one case is that case's verdict
        run.record(name, "fail", f"{type(exc).__name__}: {exc}")


async def run_suite(settings: ConformanceSettings, *, claims: ClaimFactory) -> SuiteResult:
    """Every case in ``CASES`` against the plugin ``settings`` points at, in that order."""
    if (settings.registration_socket is None) == (settings.registry_dir is None):
        raise ValueError("give exactly one of registration_socket and registry_dir")
    run = _Run(settings, claims)
    found: _Discovered | None = None
    try:
        try:
            found = await _discover(settings)
        except emulator.KubeletError as exc:
            run.record("registration.order", "fail", str(exc))
        if found is not None:
            run.driver = settings.driver_name or found.info.name
            run.case_started = time.monotonic()
            run.check_info(found)
            for version in (KUBELET_132, KUBELET_134):
                check = functools.partial(run.check_version, found.socket, version)
                await _run_case(run, f"version.kubelet-{version}", check)
        if run.plugin is not None:
            steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("invalid-argument.empty-uid", run.check_invalid_argument),
                ("unprepare.unknown-claim", run.check_unprepare_unknown),
                ("prepare.one-entry-per-claim", run.check_one_entry_per_claim),
                ("prepare.twice", run.check_prepare_twice),
                ("prepare.per-claim-error", run.check_per_claim_error),
                ("cdi.qualified-ids", run.check_cdi),
                ("unprepare.twice", run.check_unprepare_twice),
            ]
            for name, body in steps:
                await _run_case(run, name, body)
            for name in CASE_NAMES:
                if name != "deadline" and name not in run.results:
                    run.record(name, "fail", "not reached: an earlier step of its scenario failed")
            run.check_deadline()
    finally:
        await run.cleanup()
    reason = (
        "not run: the plugin did not register"
        if found is None
        else (f"not run: no DRA service usable by a {settings.kubelet_version} kubelet")
    )
    cases = tuple(run.results.get(name) or CaseResult(name, "fail", reason) for name in CASE_NAMES)
    return SuiteResult(
        cases=cases,
        driver=run.driver,
        endpoint=found.info.endpoint if found is not None else "",
        service=run.plugin.service if run.plugin is not None else "",
    )
