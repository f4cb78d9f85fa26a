"""Plugin registration: what the kubelet's plugin watcher is told about this driver (its
name, its DRA socket and the service versions it serves), and the kubelet's answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dralet.protocol.proto import (
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

__all__ = [
    "DRA_PLUGIN_TYPE",
    "HEALTH_SERVICE_VERSIONS",
    "SUPPORTED_VERSIONS",
    "RegistrationServicer",
]

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
# Advertised strings, v1 first: 1.34+ kubelets take the first they know, 1.32/1.33 pick v1beta1.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# Health v1 is what a 1.37 kubelet picks when both are advertised; older kubelets know only
# v1alpha1 (kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager_test.go,
# TestPickHealthService; staging/src/k8s.io/kubelet/pkg/apis/dra-health/v1/api.proto).
HEALTH_SERVICE_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


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
