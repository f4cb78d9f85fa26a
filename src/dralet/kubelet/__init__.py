"""A kubelet emulator: the kubelet's side of plugin registration and the DRA gRPC API.

It does what a kubelet does, over the real protocol on unix sockets: watches the
registry directory for sockets (``emulator``), picks the DRA service version the way a
1.34+ kubelet does (the plugin's order; no fallback) or the way a 1.32/1.33 kubelet does
(its own preference, v1beta1 first) and the health service as the 1.37 kubelet does (v1
over v1alpha1) (``services``), then calls NodePrepareResources and
NodeUnprepareResources with a 45 s deadline and judges the answer as the kubelet would
(``plugin``, ``results``), and watches device health as each release does (``health``).
``heartbeat`` keeps a Node Ready on a real API server.
``dralet conformance`` and ``dralet demo`` play the kubelet with it.
"""

from dralet.kubelet.emulator import GET_INFO_TIMEOUT, KubeletEmulator
from dralet.kubelet.health import HEALTH_RETRY_PERIOD, HealthWatch
from dralet.kubelet.heartbeat import NodeHeartbeat
from dralet.kubelet.plugin import CALL_TIMEOUT, PluginConnection
from dralet.kubelet.results import (
    ClaimResult,
    DeviceResult,
    KubeletClaim,
    KubeletError,
    PrepareResult,
    UnprepareResult,
)
from dralet.kubelet.services import (
    DRA_PLUGIN_TYPE,
    HEALTH_V1,
    HEALTH_V1ALPHA1,
    KUBELET_132_PREFERENCE,
    KUBELET_134_SERVICES,
    V1,
    V1ALPHA4,
    V1BETA1,
    choose_health_service,
    choose_service,
    watched_health_service,
)

__all__ = [
    "CALL_TIMEOUT",
    "DRA_PLUGIN_TYPE",
    "GET_INFO_TIMEOUT",
    "HEALTH_RETRY_PERIOD",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "KUBELET_132_PREFERENCE",
    "KUBELET_134_SERVICES",
    "V1",
    "V1ALPHA4",
    "V1BETA1",
    "ClaimResult",
    "DeviceResult",
    "HealthWatch",
    "KubeletClaim",
    "KubeletEmulator",
    "KubeletError",
    "NodeHeartbeat",
    "PluginConnection",
    "PrepareResult",
    "UnprepareResult",
    "choose_health_service",
    "choose_service",
    "watched_health_service",
]
