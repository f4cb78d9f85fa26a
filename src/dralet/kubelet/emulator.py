"""A kubelet emulator: the kubelet's side of plugin registration and the DRA gRPC API.

It does what a kubelet does, over the real protocol on unix sockets: watches the
registry directory for sockets (dot files and non-sockets are ignored), calls GetInfo
with a 1 s deadline, picks the DRA service version the way a 1.34+ kubelet does (the
plugin's order; no fallback) or the way a 1.32/1.33 kubelet does (its own preference,
v1beta1 first) and the health service as the 1.37 kubelet does (v1 over v1alpha1),
notifies the registration status, then calls NodePrepareResources and
NodeUnprepareResources with a 45 s deadline and judges the answer as the kubelet would
(one entry per claim, no unknown UIDs, per-claim errors fail the pod's call).
"""

from __future__ import annotations

import asyncio
import datetime
import stat
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from dralet import kube
from dralet.kube import resources
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
    "ClaimResult",
    "KubeletClaim",
    "KubeletEmulator",
    "KubeletError",
    "NodeHeartbeat",
    "PluginConnection",
    "PrepareResult",
    "UnprepareResult",
]

DRA_PLUGIN_TYPE = "DRAPlugin"
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
CALL_TIMEOUT = 45.0
DISCOVERY_POLL_INTERVAL = 0.02
V1 = "v1.DRAPlugin"
V1BETA1 = "v1beta1.DRAPlugin"
V1ALPHA4 = "v1alpha3.NodeService"
# Services a 1.34+ kubelet can use, and the 1.32/1.33 kubelet's own preference order
# (kubernetes/kubernetes pkg/kubelet/cm/dra/plugin: registration.go in 1.32,
# dra_plugin_manager.go from 1.33; 1.34 dropped v1alpha4 and walks the plugin's order).
KUBELET_134_SERVICES = (V1, V1BETA1)
KUBELET_132_PREFERENCE = (V1BETA1, V1ALPHA4)
HEALTH_V1 = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
# A 1.37 kubelet prefers health v1 over v1alpha1 whatever the plugin's order
# (kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager_test.go,
# TestPickHealthService "both-picks-v1"); earlier kubelets know only v1alpha1.
HEALTH_V1_KUBELET_MINOR = 37


class KubeletError(Exception):
    """What the kubelet would report (pod event) when a registration or call fails."""


@dataclass(frozen=True)
class KubeletClaim:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class DeviceResult:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimResult:
    devices: tuple[DeviceResult, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PrepareResult:
    claims: dict[str, ClaimResult]
    kubelet_error: str = ""
    """The kubelet's verdict on the whole call ('' = every claim prepared)."""

    def cdi_ids(self, uid: str) -> list[str]:
        return [i for d in self.claims[uid].devices for i in d.cdi_device_ids]


@dataclass(frozen=True)
class UnprepareResult:
    claims: dict[str, str]
    kubelet_error: str = ""


def choose_service(supported: Sequence[str], *, kubelet_version: str) -> str:
    """The DRA service a kubelet of ``kubelet_version`` picks from ``supported``."""
    if not supported:
        raise KubeletError("plugin advertises no supported versions")
    minor = int(kubelet_version.split(".")[1])
    if minor >= 34:
        for candidate in supported:
            if candidate in KUBELET_134_SERVICES:
                return candidate
        raise KubeletError(
            f"none of services supported by the plugin ({list(supported)}) are supported "
            f"by the kubelet ({list(KUBELET_134_SERVICES)})"
        )
    for preferred in KUBELET_132_PREFERENCE:
        if preferred in supported:
            return preferred
    return V1ALPHA4  # 1.32/1.33 fall back to the alpha API when nothing matches


def choose_health_service(supported: Sequence[str], *, kubelet_version: str) -> str:
    """The health service a kubelet of ``kubelet_version`` watches ('' = none)."""
    minor = int(kubelet_version.split(".")[1])
    known = (HEALTH_V1, HEALTH_V1ALPHA1) if minor >= HEALTH_V1_KUBELET_MINOR else (HEALTH_V1ALPHA1,)
    return next((s for s in known if s in supported), "")


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

    async def watch_health(self) -> AsyncGenerator[Any, None]:
        """NodeWatchResources of the health service this kubelet picked (v1alpha1 by default)."""
        pb2, pb2_grpc = _HEALTH_MODULES[self.health_service or HEALTH_V1ALPHA1]
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


class KubeletEmulator:
    """Discovers and registers plugins found in ``registry_dir``."""

    def __init__(
        self,
        registry_dir: Path,
        *,
        kubelet_version: str = "1.34",
        call_timeout: float = CALL_TIMEOUT,
    ) -> None:
        self.registry_dir = registry_dir
        self.kubelet_version = kubelet_version
        self.call_timeout = call_timeout
        self.plugins: list[PluginConnection] = []

    def sockets(self) -> list[Path]:
        """Unix sockets in the registry dir, as the plugin watcher sees them."""
        found: list[Path] = []
        try:
            entries = sorted(self.registry_dir.iterdir())
        except FileNotFoundError:
            return found
        for path in entries:
            if path.name.startswith("."):
                continue
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.append(path)
            except FileNotFoundError:
                continue
        return found

    async def register(self, socket_path: Path) -> PluginConnection:
        """One registration attempt: GetInfo, validate, NotifyRegistrationStatus."""
        async with grpc.aio.insecure_channel(f"unix:{socket_path}") as channel:
            stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT
            )
            try:
                if info.type != DRA_PLUGIN_TYPE:
                    raise KubeletError(f"no handler for plugin type {info.type!r}")
                service = choose_service(
                    list(info.supported_versions), kubelet_version=self.kubelet_version
                )
            except KubeletError as exc:
                await stub.NotifyRegistrationStatus(
                    pluginregistration_v1_pb2.RegistrationStatus(
                        plugin_registered=False, error=str(exc)
                    ),
                    timeout=NOTIFY_TIMEOUT,
                )
                raise
            await stub.NotifyRegistrationStatus(
                pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True),
                timeout=NOTIFY_TIMEOUT,
            )
        plugin = PluginConnection(
            info=info,
            service=service,
            registration_socket=socket_path,
            call_timeout=self.call_timeout,
            health_service=choose_health_service(
                list(info.supported_versions), kubelet_version=self.kubelet_version
            ),
        )
        self.plugins.append(plugin)
        return plugin

    async def wait_for_plugin(self, driver_name: str, *, within: float = 30.0) -> PluginConnection:
        """Wait until a registration socket for ``driver_name`` appears, then register it."""
        deadline = time.monotonic() + within
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for path in self.sockets():
                if not path.name.startswith(driver_name):
                    continue
                try:
                    plugin = await self.register(path)
                except (grpc.aio.AioRpcError, KubeletError) as exc:
                    last_error = exc
                    continue
                if plugin.info.name == driver_name:
                    return plugin
                await plugin.close()
            await asyncio.sleep(DISCOVERY_POLL_INTERVAL)
        raise KubeletError(f"plugin {driver_name} did not register within {within}s: {last_error}")

    async def close(self) -> None:
        for plugin in self.plugins:
            await plugin.close()
        self.plugins.clear()


LEASES = resources.Resource(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True
)
NODE_LEASE_NAMESPACE = "kube-node-lease"
HEARTBEAT_INTERVAL = 10.0
"""Seconds between status and Lease renewals, as a kubelet's nodeStatusUpdateFrequency."""
LEASE_DURATION = 40


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeHeartbeat:
    """Keeps a Node object Ready on a real API server, as a kubelet (or kwok) does.

    ``register()`` creates the Node (if absent) and its Lease in ``kube-node-lease`` and
    reports it Ready with some allocatable capacity; ``run()`` then renews the Ready
    condition and the Lease every ``interval`` seconds so the node lifecycle controller
    never taints it and the scheduler places pods on it.
    """

    def __init__(
        self,
        client: kube.KubeClient,
        node_name: str,
        *,
        labels: dict[str, str] | None = None,
        capacity: dict[str, str] | None = None,
        interval: float = HEARTBEAT_INTERVAL,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.labels = {"kubernetes.io/hostname": node_name, **(labels or {})}
        self.capacity = capacity or {"cpu": "16", "memory": "64Gi", "pods": "110"}
        self.interval = interval
        self.uid = ""

    async def register(self) -> dict[str, Any]:
        """Create the Node and its Lease if needed and report Ready; the Node."""
        try:
            node = await self.client.get(resources.NODES, self.node_name)
        except kube.ApiError as error:
            if not error.not_found:
                raise
            node = await self.client.create(
                resources.NODES,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": self.node_name, "labels": self.labels},
                },
            )
        self.uid = str(node["metadata"]["uid"])
        await self.beat()
        return node

    def _status(self) -> dict[str, Any]:
        now = _now()

        def condition(kind: str, status: str, reason: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        return {
            "capacity": self.capacity,
            "allocatable": self.capacity,
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            ],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "amd64"},
        }

    async def beat(self) -> None:
        """One renewal: Node status (Ready) and the node's Lease."""
        await self.client.merge_patch(
            resources.NODES, self.node_name, {"status": self._status()}, subresource="status"
        )
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.node_name,
                "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self.uid}
                ],
            },
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": LEASE_DURATION,
                "renewTime": _micro_now(),
            },
        }
        try:
            await self.client.merge_patch(
                LEASES,
                self.node_name,
                {"spec": lease["spec"]},
                namespace=NODE_LEASE_NAMESPACE,
            )
        except kube.ApiError as error:
            if not error.not_found:
                raise
            await self.client.create(LEASES, lease, namespace=NODE_LEASE_NAMESPACE)

    async def run(self) -> None:
        """Register, then renew every ``interval`` seconds until cancelled."""
        await self.register()
        while True:
            await asyncio.sleep(self.interval)
            await self.beat()
