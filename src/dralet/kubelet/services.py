"""Which DRA and health services a kubelet of a given version picks from a plugin's list."""

from __future__ import annotations

from collections.abc import Sequence

from dralet.kubelet.results import KubeletError

__all__ = [
    "DRA_PLUGIN_TYPE",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "KUBELET_132_PREFERENCE",
    "KUBELET_134_SERVICES",
    "V1",
    "V1ALPHA4",
    "V1BETA1",
    "choose_health_service",
    "choose_service",
    "watched_health_service",
]

DRA_PLUGIN_TYPE = "DRAPlugin"
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


HEALTH_WATCH_DEFAULT_ON_MINOR = 36
"""ResourceHealthStatus is beta and on by default from 1.36 (alpha, off, 1.31-1.35):
k8s.io/kubernetes@v1.36.0 pkg/features/kube_features.go."""


def watched_health_service(supported: Sequence[str], *, kubelet_version: str) -> str:
    """The health service a kubelet of ``kubelet_version`` (default gates) opens a stream
    to ('' = none). 1.37 and later open one only to a plugin that advertises it
    (k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go,
    ``chosenHealthService != ""``); 1.36 opens v1alpha1 to every plugin, advertised or
    not (@v1.36.0, same file); before 1.36 the gate is off."""
    minor = int(kubelet_version.split(".")[1])
    if minor >= HEALTH_V1_KUBELET_MINOR:
        return choose_health_service(supported, kubelet_version=kubelet_version)
    if minor >= HEALTH_WATCH_DEFAULT_ON_MINOR:
        return HEALTH_V1ALPHA1
    return ""
