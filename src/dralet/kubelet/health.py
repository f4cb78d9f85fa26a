"""The kubelet's health watch of one plugin, as each release runs it.

The kubelet opens a NodeWatchResources stream in a loop that runs its body again
``retry_period`` (5 s) after the body returns (``wait.UntilWithContext``), for as long as
the plugin is registered:

- 1.36 opens health v1alpha1 of every plugin, whatever it advertises, and logs an error
  for every end of the stream but EOF (k8s.io/kubernetes@v1.36.0
  pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go and pkg/kubelet/cm/dra/manager.go
  ``HandleWatchResourcesStream``): a driver answering Unimplemented gets an error line
  every 5 s.
- 1.37 and 1.38 open the health service the plugin advertises (v1 over v1alpha1), none if
  it advertises none, and stop watching when the stream ends with Unimplemented, logging
  it at V(2)/V(4) (k8s.io/kubernetes@v1.37.2 and @v1.38.0-beta.0, same files).
- Before 1.36 the ResourceHealthStatus gate is off: no watch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc

from dralet.kubelet.plugin import PluginConnection
from dralet.kubelet.services import HEALTH_V1_KUBELET_MINOR, watched_health_service

__all__ = ["HEALTH_RETRY_PERIOD", "HealthWatch"]

HEALTH_RETRY_PERIOD = 5.0
"""Seconds between the end of one health stream and the next attempt."""


@dataclass
class HealthWatch:
    """Watches ``plugin``'s health as a kubelet of ``kubelet_version`` does, recording
    what that kubelet would: the messages, each attempt and each error it would log."""

    plugin: PluginConnection
    kubelet_version: str
    retry_period: float = HEALTH_RETRY_PERIOD
    messages: list[Any] = field(default_factory=list)
    attempts: int = 0
    """Streams opened."""
    logged_errors: list[str] = field(default_factory=list)
    """What the kubelet logs at error level: one line per failed stream."""
    stopped: str = ""
    """Why the kubelet stopped watching ('' while it watches or never did)."""

    @property
    def service(self) -> str:
        """The health service this kubelet opens ('' = none)."""
        advertised = list(self.plugin.info.supported_versions)
        return watched_health_service(advertised, kubelet_version=self.kubelet_version)

    async def run(self) -> None:
        """Watch until cancelled, or until this kubelet stops watching."""
        service = self.service
        if not service:
            self.stopped = "no health service to watch"
            return
        stops_on_unimplemented = int(self.kubelet_version.split(".")[1]) >= HEALTH_V1_KUBELET_MINOR
        while True:
            self.attempts += 1
            try:
                async for message in self.plugin.watch_health(service):
                    self.messages.append(message)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED and stops_on_unimplemented:
                    self.stopped = f"{service} answered Unimplemented"
                    return
                self.logged_errors.append(
                    f"Error receiving from WatchResources stream: {exc.code().name}: "
                    f"{exc.details()}"
                )
            await asyncio.sleep(self.retry_period)
