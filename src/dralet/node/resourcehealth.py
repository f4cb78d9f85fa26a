"""The DRA resource health service (v1alpha1, and v1 from kubelet 1.37): every device's
health streamed to the kubelet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from types import ModuleType
from typing import Any

import grpc

from dralet.node.backend import (
    ClaimBackend,
    DeviceHealth,
    HealthNotSupported,
    HealthStatus,
)
from dralet.node.claims.calls import Invoker, normalize
from dralet.protocol.proto import (
    drahealth_v1_pb2,
    drahealth_v1_pb2_grpc,
    drahealth_v1alpha1_pb2,
    drahealth_v1alpha1_pb2_grpc,
)

__all__ = ["ResourceHealthServicer", "ResourceHealthV1Servicer"]

log = logging.getLogger(__name__)

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
