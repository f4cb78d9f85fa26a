"""The kubelet's plugin watcher: finds registration sockets in the registry directory (dot
files and non-sockets are ignored), calls GetInfo with a 1 s deadline, picks the DRA and
health services as a kubelet of the configured version does, and notifies the
registration status.
"""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import grpc

from dralet.kubelet.plugin import CALL_TIMEOUT, PluginConnection
from dralet.kubelet.results import KubeletError
from dralet.kubelet.services import DRA_PLUGIN_TYPE, choose_health_service, choose_service
from dralet.protocol.proto import pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc

__all__ = ["GET_INFO_TIMEOUT", "KubeletEmulator"]

GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
DISCOVERY_POLL_INTERVAL = 0.02


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

    async def register(
        self, socket_path: Path, *, driver_name: str | None = None
    ) -> PluginConnection:
        """One registration attempt: GetInfo, validate, NotifyRegistrationStatus. With
        ``driver_name``, a plugin of another name is left alone (``KubeletError``)."""
        async with grpc.aio.insecure_channel(f"unix:{socket_path}") as channel:
            stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT
            )
            if driver_name is not None and info.name != driver_name:
                raise KubeletError(f"{socket_path} is plugin {info.name!r}")
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
        """Wait until a registration socket for ``driver_name`` appears, then register it.

        Every socket is asked its name, as the kubelet does: a rolling update's socket may
        be named by a hash alone (``dra-<hash>-reg.sock``, the Go helper v0.38)."""
        deadline = time.monotonic() + within
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for path in self.sockets():
                try:
                    return await self.register(path, driver_name=driver_name)
                except (grpc.aio.AioRpcError, KubeletError) as exc:
                    last_error = exc
            await asyncio.sleep(DISCOVERY_POLL_INTERVAL)
        raise KubeletError(f"plugin {driver_name} did not register within {within}s: {last_error}")

    async def close(self) -> None:
        for plugin in self.plugins:
            await plugin.close()
        self.plugins.clear()
