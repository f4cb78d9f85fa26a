"""gRPC servicers: plugin registration, DRA v1 and v1beta1 (one implementation), health.

Both DRA versions have the same messages (v1 adds ``share_id``), so one function builds
each response from the claim engine's outcome using the version's own message module. A
malformed request fails as a whole with InvalidArgument before anything is touched;
everything about one claim goes into that claim's entry.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import grpc

from dralet import errors, kubenames, logs
from dralet.node.backend import (
    ClaimBackend,
    ClaimRef,
    ClaimUID,
    DeviceHealth,
    HealthNotSupported,
    HealthStatus,
)
from dralet.node.claims import ClaimEngine, PrepareOutcome
from dralet.node.invoke import Invoker, normalize
from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    drahealth_v1_pb2,
    drahealth_v1_pb2_grpc,
    drahealth_v1alpha1_pb2,
    drahealth_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

__all__ = [
    "DRA_SERVICES",
    "SUPPORTED_VERSIONS",
    "DRAv1Servicer",
    "DRAv1beta1Servicer",
    "RegistrationServicer",
    "ResourceHealthServicer",
    "ResourceHealthV1Servicer",
    "parse_claims",
]

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
# Advertised strings, v1 first: 1.34+ kubelets take the first they know, 1.32/1.33 pick v1beta1.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# Health v1 is what a 1.37 kubelet picks when both are advertised; older kubelets know only
# v1alpha1 (kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager_test.go,
# TestPickHealthService; staging/src/k8s.io/kubelet/pkg/apis/dra-health/v1/api.proto).
HEALTH_SERVICE_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
DRA_SERVICES = (
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
)


class RegistrationServicer(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    """Answers the kubelet's plugin watcher: who we are and where the DRA socket is."""

    def __init__(self, *, driver_name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.versions = versions
        self.status: pluginregistration_v1_pb2.RegistrationStatus | None = None
        self.registered = asyncio.Event()

    async def GetInfo(
        self, request: pluginregistration_v1_pb2.InfoRequest, context: Any
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return pluginregistration_v1_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=self.endpoint,
            supported_versions=list(self.versions),
        )

    async def NotifyRegistrationStatus(
        self, request: pluginregistration_v1_pb2.RegistrationStatus, context: Any
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        # Never an error: an error makes the kubelet redo the whole registration.
        self.status = request
        if request.plugin_registered:
            log.info("registered with the kubelet")
            self.registered.set()
        else:
            log.error("kubelet refused registration: %s", request.error)
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


@dataclass(frozen=True)
class ParsedClaims:
    refs: list[ClaimRef] = field(default_factory=list)
    """Valid claims, deduplicated, keyed by the UID exactly as the kubelet sent it."""
    refused: dict[str, str] = field(default_factory=dict)
    """UID as sent → per-claim error (a UID the engine must not re-key, e.g. upper-case)."""


def parse_claims(claims: Sequence[Any]) -> ParsedClaims:
    """Validate the kubelet's ``(namespace, uid, name)`` claim references.

    Raises ``InvalidRequestError`` naming the first bad field (nothing has been touched).
    A UID that is a UUID but not in the API server's canonical form is refused for that
    claim only: answering under another key than the kubelet sent would lose the answer.
    """
    parsed = ParsedClaims()
    seen: dict[str, ClaimRef] = {}
    for index, claim in enumerate(claims):
        namespace, uid, name = claim.namespace, claim.uid, claim.name
        where = f"claims[{index}]"
        uid_problem = kubenames.uid_problem(uid)
        if uid_problem is not None and kubenames.uid_problem(uid.lower()) is None:
            parsed.refused[uid] = f"claim uid {uid} {uid_problem}"
            continue
        if uid_problem is not None:
            raise errors.InvalidRequestError(f"{where}: uid {uid[:64]!r} {uid_problem}")
        namespace_problem = kubenames.dns_label_problem(namespace) if namespace else "is empty"
        if namespace_problem is not None:
            raise errors.InvalidRequestError(
                f"{where}: namespace {namespace[:64]!r} {namespace_problem}"
            )
        name_problem = kubenames.dns_subdomain_problem(name) if name else "is empty"
        if name_problem is not None:
            raise errors.InvalidRequestError(f"{where}: name {name[:64]!r} {name_problem}")
        ref = ClaimRef(uid=ClaimUID(uid), namespace=namespace, name=name)
        before = seen.get(uid)
        if before is not None and before != ref:
            raise errors.InvalidRequestError(
                f"{where}: uid {uid} appears twice with different names "
                f"({before.namespace}/{before.name} and {namespace}/{name})"
            )
        if before is None:
            seen[uid] = ref
            parsed.refs.append(ref)
    return parsed


async def _parse_or_abort(request: Any, context: Any) -> ParsedClaims:
    try:
        return parse_claims(request.claims)
    except errors.InvalidRequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise


async def _abort_irreversible(context: Any, exc: errors.IrreversibleError) -> None:
    # The only path to Internal: a backend could neither finish nor undo a device.
    log.error("irreversible failure: %s", exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"irreversible failure, manual repair: {exc}")


_O = TypeVar("_O")


async def _engine_call(
    request: Any, context: Any, call: Callable[[Sequence[ClaimRef]], Awaitable[dict[str, _O]]]
) -> tuple[ParsedClaims, dict[str, _O]]:
    """The request's claims checked at the edge, then the engine's ``call`` of those it
    took; an irreversible failure fails the RPC (Internal)."""
    parsed = await _parse_or_abort(request, context)
    try:
        return parsed, await call(parsed.refs)
    except errors.IrreversibleError as exc:
        await _abort_irreversible(context, exc)
        raise


def _fill_prepare_response(
    pb2: ModuleType, outcomes: Mapping[str, PrepareOutcome], *, with_share_id: bool
) -> Any:
    response = pb2.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]  # touching the key creates the entry
        if outcome.error:
            entry.error = outcome.error
            continue
        for device in outcome.devices:
            out = entry.devices.add(
                request_names=list(device.request_names),
                pool_name=device.pool,
                device_name=device.device,
                cdi_device_ids=[*device.cdi_device_ids, *device.external_cdi_ids],
            )
            if with_share_id and device.share_id:
                out.share_id = device.share_id
    return response


def _fill_unprepare_response(pb2: ModuleType, outcomes: Mapping[str, str]) -> Any:
    response = pb2.NodeUnprepareResourcesResponse()
    for uid, error in outcomes.items():
        entry = response.claims[uid]
        if error:
            entry.error = error
    return response


class _DRAImplementation:
    """The one implementation behind both DRA service versions."""

    def __init__(self, engine: ClaimEngine, *, pb2: ModuleType, with_share_id: bool) -> None:
        self.engine = engine
        self.pb2 = pb2
        self.with_share_id = with_share_id

    async def prepare(self, request: Any, context: Any) -> Any:
        with logs.bind(request_id=uuid.uuid4().hex[:12], rpc="NodePrepareResources"):
            parsed, outcomes = await _engine_call(request, context, self.engine.prepare)
            for uid, error in parsed.refused.items():
                outcomes[uid] = PrepareOutcome(error=error)
            return _fill_prepare_response(self.pb2, outcomes, with_share_id=self.with_share_id)

    async def unprepare(self, request: Any, context: Any) -> Any:
        with logs.bind(request_id=uuid.uuid4().hex[:12], rpc="NodeUnprepareResources"):
            parsed, outcomes = await _engine_call(request, context, self.engine.unprepare)
            outcomes.update(parsed.refused)
            return _fill_unprepare_response(self.pb2, outcomes)


class _DRAServicerMethods:
    """The two RPCs, shared by both versions' servicer classes."""

    _impl: _DRAImplementation

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return await self._impl.prepare(request, context)

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return await self._impl.unprepare(request, context)


class DRAv1Servicer(_DRAServicerMethods, dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, engine: ClaimEngine) -> None:
        self._impl = _DRAImplementation(engine, pb2=dra_v1_pb2, with_share_id=True)


class DRAv1beta1Servicer(_DRAServicerMethods, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, engine: ClaimEngine) -> None:
        self._impl = _DRAImplementation(engine, pb2=dra_v1beta1_pb2, with_share_id=False)


_HEALTH_CODES = {
    HealthStatus.UNKNOWN: drahealth_v1alpha1_pb2.UNKNOWN,
    HealthStatus.HEALTHY: drahealth_v1alpha1_pb2.HEALTHY,
    HealthStatus.UNHEALTHY: drahealth_v1alpha1_pb2.UNHEALTHY,
}


class ResourceHealthServicer(drahealth_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    """Streams every device's health: at once, on every change, and at least each interval.

    The kubelet marks devices it has not heard about for 30 s as Unknown, so the full
    list is resent at ``interval`` even when nothing changed. This is health v1alpha1;
    ``ResourceHealthV1Servicer`` is the same implementation with v1's messages.

    A backend that does not report health (``supported`` False, or ``HealthNotSupported``
    from ``health()``) gets an answer each kubelet release takes quietly: see
    ``_not_supported``. ``stopping`` is set when the driver stops.
    """

    _pb2: ModuleType = drahealth_v1alpha1_pb2

    def __init__(
        self,
        backend: ClaimBackend | Invoker,
        *,
        pool: str,
        interval: float,
        timeout_seconds: int = 0,
        supported: bool = True,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.backend = normalize(backend)
        self.pool = pool
        self.interval = interval
        self.timeout_seconds = timeout_seconds
        self.supported = supported
        self.stopping = stopping if stopping is not None else asyncio.Event()

    async def _snapshot(self) -> dict[str, DeviceHealth]:
        health = dict(await self.backend.health())
        for device in await self.backend.devices():
            health.setdefault(device.name, DeviceHealth(HealthStatus.UNKNOWN))
        return health

    def _message(self, health: Mapping[str, DeviceHealth]) -> Any:
        now = int(time.time())
        pb2 = self._pb2
        return pb2.NodeWatchResourcesResponse(
            devices=[
                pb2.DeviceHealth(
                    device=pb2.DeviceIdentifier(pool_name=self.pool, device_name=name),
                    health=_HEALTH_CODES[h.status],
                    last_updated_time=now,
                    health_check_timeout_seconds=self.timeout_seconds,
                    message=h.message,
                )
                for name, h in sorted(health.items())
            ]
        )

    async def _not_supported(self, context: Any) -> None:
        """v1alpha1 without health: keep the stream open, silent, until the driver stops.

        Only a 1.36 kubelet watches v1alpha1 of a driver that does not advertise it: it
        watches every plugin, and logs an error and retries every 5 s whatever ends the
        stream but EOF (k8s.io/kubernetes@v1.36.0 pkg/kubelet/cm/dra/plugin/
        dra_plugin_manager.go, manager.go HandleWatchResourcesStream). Unimplemented
        would be that log spam; an idle stream is one goroutine."""
        await self.stopping.wait()

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        previous: dict[str, DeviceHealth] | None = None
        last_sent = 0.0
        poll = min(self.interval, 1.0)
        if not self.supported:
            await self._not_supported(context)
            return
        while True:
            try:
                current = await self._snapshot()
            except HealthNotSupported:
                await self._not_supported(context)
                return
            now = time.monotonic()
            if current != previous or now - last_sent >= self.interval:
                yield self._message(current)
                previous, last_sent = current, now
            await asyncio.sleep(poll)


class ResourceHealthV1Servicer(
    ResourceHealthServicer, drahealth_v1_pb2_grpc.DRAResourceHealthServicer
):
    """Health v1 (1.37+): v1alpha1's messages in package v1, one implementation."""

    _pb2 = drahealth_v1_pb2

    async def _not_supported(self, context: Any) -> None:
        """v1 without health: Unimplemented. Only 1.37+ kubelets speak v1, and they watch
        only a plugin that advertises it and stop watching on Unimplemented
        (k8s.io/kubernetes@v1.37.2 and @v1.38.0-beta.0 pkg/kubelet/cm/dra/plugin/
        dra_plugin_manager.go; the Go helper's ``ErrHealthNotSupported``)."""
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "this driver does not report device health"
        )
