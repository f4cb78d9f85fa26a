"""What cluster-mode runs left in the API: every object carrying a run label."""

from __future__ import annotations

from dralet.conformance.cluster import objects
from tests.k8sapi import ClusterApi

__all__ = ["left_behind"]

KINDS = ("Pod", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "Namespace")


def left_behind(api: ClusterApi) -> list[str]:
    """``Kind/name`` of every object of any run, in any namespace."""
    return [
        f"{kind}/{o['metadata']['name']}"
        for kind in KINDS
        for o in api.list(kind, label_selector=objects.RUN_LABEL)
    ]
