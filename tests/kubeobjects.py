"""Small builders of DRA objects in the shape of a given resource.k8s.io version."""

from __future__ import annotations

from typing import Any


def claim(name: str, version: str, *, namespace: str = "default") -> dict[str, Any]:
    request: dict[str, Any] = {"name": "gpu"}
    if version == "v1beta1":
        request["deviceClassName"] = "gpu.example.com"
    else:
        request["exactly"] = {"deviceClassName": "gpu.example.com"}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def allocation(*, driver: str, pool: str, device: str) -> dict[str, Any]:
    """A claim status as the scheduler writes it: allocated and reserved for a pod."""
    return {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "pod-a", "uid": "pod-uid-a"}],
    }


def ready_status(driver: str, pool: str, device: str) -> dict[str, Any]:
    """A claim's ``status.devices`` entry as a driver writes it after a prepare."""
    return {
        "driver": driver,
        "pool": pool,
        "device": device,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "",
                "lastTransitionTime": "2026-12-04T00:00:00Z",
            }
        ],
    }
