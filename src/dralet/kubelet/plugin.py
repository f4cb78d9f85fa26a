"""A registered plugin, called over its DRA and health services as the kubelet calls it
(45 s deadline) and judged as the kubelet judges the answer: one entry per claim, no
unknown UIDs, a per-claim error fails the pod's call.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from dralet.kubelet.results import (
    ClaimResult,
    DeviceResult,
    KubeletClaim,
    KubeletError,
    PrepareResult,
    UnprepareResult,
)
from dralet.kubelet.services import HEALTH_V1, HEALTH_V1ALPHA1, V1, V1BETA1
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
)

__all__ = ["CALL_TIMEOUT", "PluginConnection"]

CALL_TIMEOUT = 45.0

_HEALTH_MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    HEALTH_V1: (drahealth_v1_pb2, drahealth_v1_pb2_grpc),
    HEALTH_V1ALPHA1: (drahealth_v1alpha1_pb2, drahealth_v1alpha1_pb2_grpc),
}

_MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    V1: (dra_v1_pb2, dra_v1_pb2_grpc),
    V1BETA1: (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


def _judge(
    operation: str, requested: Sequence[KubeletClaim], keys: Sequence[str], errors: dict[str, str]
) -> str:
    names = {c.uid: f"{c.namespace}/{c.name}" for c in requested}
    for key in keys:
        if key not in names:
            return f"{operation} returned result for unknown claim UID {key}"
    for uid, error in errors.items():
        if error:
            return f"{operation} failed for ResourceClaim {names[uid]}: {error}"
    missing = len(set(names) - set(keys))
    if missing:
        return f"{operation} skipped {missing} ResourceClaims"
    return ""


@dataclass
class PluginConnection:
    """A registered plugin, called as the kubelet calls it."""

    info: pluginregistration_v1_pb2.PluginInfo
    service: str
    registration_socket: Path
    call_timeout: float = CALL_TIMEOUT
    health_service: str = HEALTH_V1ALPHA1
    """The health service this kubelet watches ('' = none)."""
    _channel: grpc.aio.Channel | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return self.info.endpoint or str(self.registration_socket)

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix:{self.endpoint}")
        return self._channel

    def _stub(self) -> tuple[ModuleType, Any]:
        if self.service not in _MODULES:
            raise KubeletError(f"service {self.service} is not implemented by this emulator")
        pb2, pb2_grpc = _MODULES[self.service]
        return pb2, pb2_grpc.DRAPluginStub(self.channel())

    async def prepare_raw(self, claims: Sequence[KubeletClaim]) -> Any:
        pb2, stub = self._stub()
        request = pb2.NodePrepareResourcesRequest(
            claims=[pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        return await stub.NodePrepareResources(request, timeout=self.call_timeout)

    async def unprepare_raw(self, claims: Sequence[KubeletClaim]) -> Any:
        pb2, stub = self._stub()
        request = pb2.NodeUnprepareResourcesRequest(
            claims=[pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        return await stub.NodeUnprepareResources(request, timeout=self.call_timeout)

    async def prepare(self, claims: Sequence[KubeletClaim]) -> PrepareResult:
        """NodePrepareResources; gRPC errors propagate as ``grpc.aio.AioRpcError``."""
        response = await self.prepare_raw(claims)
        results = {
            uid: ClaimResult(
                devices=tuple(
                    DeviceResult(
                        request_names=tuple(d.request_names),
                        pool_name=d.pool_name,
                        device_name=d.device_name,
                        cdi_device_ids=tuple(d.cdi_device_ids),
                        share_id=d.share_id
                        if self.service == V1 and d.HasField("share_id")
                        else None,
                    )
                    for d in entry.devices
                ),
                error=entry.error,
            )
            for uid, entry in response.claims.items()
        }
        verdict = _judge(
            "NodePrepareResources",
            claims,
            list(response.claims),
            {uid: r.error for uid, r in results.items()},
        )
        return PrepareResult(claims=results, kubelet_error=verdict)

    async def unprepare(self, claims: Sequence[KubeletClaim]) -> UnprepareResult:
        response = await self.unprepare_raw(claims)
        results = {uid: entry.error for uid, entry in response.claims.items()}
        verdict = _judge("NodeUnprepareResources", claims, list(response.claims), results)
        return UnprepareResult(claims=results, kubelet_error=verdict)

    async def watch_health(self, service: str = "") -> AsyncGenerator[Any, None]:
        """NodeWatchResources of ``service``, by default the health service this kubelet
        picked (v1alpha1 when it picked none)."""
        pb2, pb2_grpc = _HEALTH_MODULES[service or self.health_service or HEALTH_V1ALPHA1]
        stub = pb2_grpc.DRAResourceHealthStub(self.channel())
        call = stub.NodeWatchResources(pb2.NodeWatchResourcesRequest())
        try:
            async for message in call:
                yield message
        finally:
            call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
