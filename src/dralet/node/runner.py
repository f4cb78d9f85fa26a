"""Lifecycle of a driver process: recover, serve, register, run background work, stop.

Start order matters to the kubelet: state is recovered before any socket exists; the
DRA socket listens before the registration socket appears (the kubelet may call the
DRA service as soon as GetInfo answers). Stop order is the reverse, staged: the
registration socket goes first (the kubelet deregisters), new calls are refused,
in-flight calls get ``shutdown_grace`` seconds, then everything left is cancelled.
With ``remove_plugin_dir_when_unused``, a stop that leaves no claim record behind removes
the plugin dir last, unless another instance still runs in it (``directories``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from dralet import errors
from dralet.checkpoint import database
from dralet.metrics import DriverMetrics
from dralet.node import directories, registration, resourcehealth, service, sockets
from dralet.node.backend import ClaimBackend, ClaimRef, DeviceMetadata, HealthNotSupported
from dralet.node.claims import ClaimEngine, ClaimSource, EventSink, RecoveryReport, metadataupdate
from dralet.node.claims.calls import Invoker, normalize
from dralet.node.settings import DriverSettings
from dralet.protocol import wire
from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    drahealth_v1_pb2,
    drahealth_v1alpha1_pb2,
    pluginregistration_v1_pb2,
)
from dralet.tasks import TaskSet

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["READINESS_SERVICE", "BackgroundWork", "NodeServer"]

log = logging.getLogger(__name__)

BackgroundWork = Callable[[], Coroutine[Any, Any, None]]

READINESS_SERVICE = "readiness"
"""The gRPC health service a readinessProbe asks: SERVING once the kubelet has registered
the driver and every ``ready_after`` event is set (the deployment's, e.g. published)."""


def _socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


UNIX_SOCKET_PATH_MAX = sockets.UNIX_PATH_MAX - 1
"""sun_path holds 108 bytes including the terminating NUL."""


def _check_socket_path(path: Path) -> None:
    length = len(os.fsencode(path))
    if length > UNIX_SOCKET_PATH_MAX:
        raise errors.PermanentError(
            f"socket path {path} is {length} bytes; unix sockets allow {UNIX_SOCKET_PATH_MAX}"
        )


def _remove_stale_socket(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        raise errors.PermanentError(f"socket path {path} is a directory; remove it first")
    if _socket_is_live(path):
        raise errors.PermanentError(
            f"another process is serving {path}; run one instance per socket name "
            "(per-instance names with --pod-uid need Kubernetes >= 1.33)"
        )
    path.unlink()
    log.info("removed stale socket %s", path)


def _service(module: ModuleType, name: str) -> ServiceDescriptor:
    service_descriptor: ServiceDescriptor = module.DESCRIPTOR.services_by_name[name]
    return service_descriptor


class NodeServer:
    """The node side of one driver: claim engine, gRPC servers, background loops.

    ``dralet.Driver`` builds one from its settings and the API pieces; tests that bring
    their own claim source run one directly.
    """

    def __init__(
        self,
        settings: DriverSettings,
        backend: ClaimBackend | Invoker,
        *,
        claims: ClaimSource | None = None,
        metrics: DriverMetrics | None = None,
        background: Mapping[str, BackgroundWork] | None = None,
        events: EventSink | None = None,
        ready_after: tuple[asyncio.Event, ...] = (),
    ) -> None:
        self.settings = settings
        self.backend = normalize(backend, timeout=settings.backend_call_timeout)
        self.metrics = metrics or DriverMetrics()
        self.engine = ClaimEngine(
            settings, backend=self.backend, claims=claims, metrics=self.metrics
        )
        self.registration = registration.RegistrationServicer(
            driver_name=settings.driver_name,
            endpoint=str(settings.dra_socket),
            versions=(*registration.SUPPORTED_VERSIONS, *registration.HEALTH_SERVICE_VERSIONS),
        )
        self.health = HealthServicer()
        self.reports_health = True
        """Whether the backend reports device health, asked at start: only then are the
        DRA health services advertised to the kubelet."""
        self._stopping = asyncio.Event()
        self.recovery: RecoveryReport | None = None
        self._background = dict(background or {})
        self.events = events
        self._ready_after = ready_after
        self._tasks = TaskSet("driver")
        self._dra_server: grpc.aio.Server | None = None
        self._registration_server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None
        self._metrics_runner: web.AppRunner | None = None
        self.stopped = asyncio.Event()
        self.metrics_url = ""
        """Where Prometheus metrics are served, once started with a metrics port."""
        self.health_port: int | None = None
        """The TCP port of the gRPC health service, once started with a health port."""
        self._plugin_dir_hold: int | None = None
        """``directories.hold_plugin_dir``'s descriptor while this instance runs."""

    # ----------------------------------------------------------------- start

    async def start(self) -> None:
        s = self.settings
        for note in directories.prepare_directories(s).notes:
            log.warning("%s", note)
        self._plugin_dir_hold = await asyncio.to_thread(directories.hold_plugin_dir, s)
        # Before recovery: no write of this process is in flight yet, and a leftover a
        # live writer of another instance still holds is left alone.
        for leftover in directories.sweep_temp_files(s):
            log.info("removed temp file %s left by an interrupted write", leftover)
        self.recovery = await self.engine.recover()
        for action, subject in self.recovery.actions:
            log.warning("recovery: %s %s", action, subject)
        if self.engine.fail_closed:
            await self._report("CheckpointCorrupt", self.engine.fail_closed)
        self.reports_health = await self._backend_reports_health()
        if not self.reports_health:
            self.registration.versions = registration.SUPPORTED_VERSIONS
            log.info("the backend does not report device health: no health service advertised")
        await self._start_dra_server()
        await self._start_registration_server()
        if s.health_port is not None:
            await self._start_health_port(s.health_port)
        if s.metrics_port is not None:
            await self._start_metrics(s.metrics_port)
        self._tasks.spawn("stale-claims", self._collect_stale_forever())
        for name, work in self._background.items():
            self._tasks.spawn(name, work())
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if self.engine.fail_closed
            else health_pb2.HealthCheckResponse.SERVING
        )
        # Liveness answers SERVING even when failing closed: restarting cannot repair a
        # corrupt checkpoint, it only turns one visible error into a crash loop.
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        for name in service.DRA_SERVICES:
            await self.health.set(name, status)
        await self.health.set(READINESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        self._tasks.spawn("readiness", self._become_ready())
        log.info(
            "driver %s serving on %s (registration %s)",
            s.driver_name,
            s.dra_socket,
            s.registration_socket,
        )

    async def update_request_metadata(
        self, claim: ClaimRef, request: str, devices: Mapping[str, DeviceMetadata]
    ) -> int:
        """Rewrite a prepared claim's device metadata file for ``request``; see
        ``dralet.Driver.update_request_metadata``."""
        return await metadataupdate.update_request_metadata(
            self.engine, claim.uid, request, devices
        )

    async def _backend_reports_health(self) -> bool:
        """One ``health()`` call: False only when the backend says ``HealthNotSupported``
        (a failing call is a health answer the stream passes on)."""
        try:
            await self.backend.health()
        except HealthNotSupported:
            return False
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the backend's health() failed at start", exc_info=True)
        return True

    async def _bind_unix(self, server: grpc.aio.Server, path: Path) -> None:
        _check_socket_path(path)
        _remove_stale_socket(path)
        old_umask = os.umask(0o177)
        try:
            # "unix:" + path: grpcio 1.85 refuses "unix://" addresses of 106 and 107 bytes,
            # which the kernel takes.
            server.add_insecure_port(f"unix:{path}")
            await server.start()
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)

    async def _start_dra_server(self) -> None:
        server = grpc.aio.server(options=wire.server_options())
        wire.add_service(
            server, service.DRAv1Servicer(self.engine), _service(dra_v1_pb2, "DRAPlugin")
        )
        wire.add_service(
            server,
            service.DRAv1beta1Servicer(self.engine),
            _service(dra_v1beta1_pb2, "DRAPlugin"),
        )
        health: dict[str, Any] = {
            "pool": self.settings.pool_name,
            "interval": self.settings.health_interval,
            "supported": self.reports_health,
            "stopping": self._stopping,
        }
        wire.add_service(
            server,
            resourcehealth.ResourceHealthV1Servicer(self.backend, **health),
            _service(drahealth_v1_pb2, "DRAResourceHealth"),
        )
        wire.add_service(
            server,
            resourcehealth.ResourceHealthServicer(self.backend, **health),
            _service(drahealth_v1alpha1_pb2, "DRAResourceHealth"),
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        await self._bind_unix(server, self.settings.dra_socket)
        self._dra_server = server

    async def _start_registration_server(self) -> None:
        server = grpc.aio.server(options=wire.server_options())
        wire.add_service(
            server, self.registration, _service(pluginregistration_v1_pb2, "Registration")
        )
        await self._bind_unix(server, self.settings.registration_socket)
        self._registration_server = server

    async def _start_health_port(self, port: int) -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.health_port = server.add_insecure_port(f"{self.settings.metrics_host}:{port}")
        await server.start()
        self._health_server = server

    async def _start_metrics(self, port: int) -> None:
        # Here, not at the top: the server side of aiohttp costs a driver without
        # --metrics-port about 2 MiB of resident memory for nothing.
        from aiohttp import web

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.metrics.exposition(), content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.metrics_host, port).start()
        self._metrics_runner = runner
        host, bound_port = runner.addresses[0][:2]
        self.metrics_url = f"http://{host}:{bound_port}/metrics"

    async def _become_ready(self) -> None:
        await self.registration.registered.wait()
        for event in self._ready_after:
            await event.wait()
        if not self.engine.fail_closed:
            await self.health.set(READINESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)

    async def _report(self, reason: str, message: str) -> None:
        """Tell operators through a Kubernetes Event; never fails the driver."""
        if self.events is None:
            return
        try:
            await self.events.warn(reason, message)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not record the %s Event", reason)

    async def _collect_stale_forever(self) -> None:
        while True:
            try:
                await self.engine.collect_stale()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("stale-claim cleanup pass failed; retrying next interval")
            await asyncio.sleep(self.settings.stale_claim_interval)

    # ----------------------------------------------------------------- stop

    async def stop(self) -> None:
        """Staged shutdown; removes only this instance's own sockets."""
        grace = self.settings.shutdown_grace
        if self._registration_server is not None:
            await self._registration_server.stop(None)
            self.settings.registration_socket.unlink(missing_ok=True)
        await self.health.enter_graceful_shutdown()
        self._stopping.set()  # idle health streams end before the grace period
        if self._dra_server is not None:
            await self._dra_server.stop(grace)
        await self.engine.work.close(grace=grace)
        if self._dra_server is not None:  # never another instance's socket
            self.settings.dra_socket.unlink(missing_ok=True)
        if self._health_server is not None:
            await self._health_server.stop(None)
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        await self._tasks.cancel_all()
        await self.engine.close()
        if self._plugin_dir_hold is not None:
            hold, self._plugin_dir_hold = self._plugin_dir_hold, None
            removed = await asyncio.to_thread(
                directories.release_plugin_dir, self.settings, hold, remove_if=self._leaves_nothing
            )
            if removed:
                log.info("removed plugin dir %s: no claim held", self.settings.plugin_dir)
        self.stopped.set()
        log.info("driver stopped")

    def _leaves_nothing(self) -> bool:
        """Whether a later start needs nothing of the plugin dir: removal asked for, the
        store usable (a failed-closed one is evidence) and holding no record of any state
        (a claim prepared, half done, or owing its finalizer removal)."""
        s = self.settings
        if not s.remove_plugin_dir_when_unused or self.engine.fail_closed:
            return False
        try:
            snapshot = database.read_only_snapshot(s.store_path, s.checkpoint_path)
        except errors.CheckpointCorruptError:
            return False
        return not snapshot.checkpoint.claims and not snapshot.corrupt
