"""Playing the control plane on the API stand-in: a Node, DeviceClasses, and ResourceClaims
allocated and reserved as the scheduler would leave them for the kubelet.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dralet.apiserver import ApiServer
from dralet.kubelet import KubeletClaim

__all__ = ["ControlPlane", "allocated_status", "claim_manifest", "claim_request"]

RESOURCE_GROUP = "resource.k8s.io"


def claim_request(name: str, *, version: str, device_class: str) -> dict[str, Any]:
    """One device request of exactly one device, in ``version``'s shape."""
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    if version == "v1beta1":
        return {"name": name, **exactly}
    return {"name": name, "exactly": exactly}


def claim_manifest(
    name: str, *, namespace: str, version: str, requests: Sequence[str], device_class: str
) -> dict[str, Any]:
    """A ResourceClaim asking for one device per request."""
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    claim_request(r, version=version, device_class=device_class) for r in requests
                ]
            }
        },
    }


def allocated_status(
    results: Sequence[Mapping[str, Any]], *, node_name: str, pod_name: str
) -> dict[str, Any]:
    """The claim status the scheduler leaves: ``results`` on ``node_name``, reserved for a pod."""
    node_term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    return {
        "allocation": {
            "devices": {"results": [dict(r) for r in results]},
            "nodeSelector": {"nodeSelectorTerms": [node_term]},
        },
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": str(uuid.uuid4())}],
    }


@dataclass
class ControlPlane:
    """Scheduler and controller moves on an ``ApiServer``, for one driver and node."""

    api: ApiServer
    driver_name: str = "gpu.example.com"
    node_name: str = "node-a"
    device_class: str = "gpu.example.com"

    @property
    def version(self) -> str:
        return self.api.preferred_version

    @property
    def api_version(self) -> str:
        return f"{RESOURCE_GROUP}/{self.version}"

    def add_node(self) -> dict[str, Any]:
        existing = self.api.get("Node", self.node_name)
        if existing is not None:
            return existing
        return self.api.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name}}
        )

    def add_device_class(self) -> dict[str, Any]:
        return self.api.create(
            {
                "apiVersion": self.api_version,
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {
                    "selectors": [{"cel": {"expression": f'device.driver == "{self.driver_name}"'}}]
                },
            }
        )

    def allocate_claim(
        self,
        name: str,
        devices: Sequence[tuple[str, str]],
        *,
        namespace: str = "default",
        pool: str | None = None,
        driver: str | None = None,
        admin_access: bool = False,
    ) -> KubeletClaim:
        """Create a claim with one request per (request, device) pair, allocated to those
        devices and reserved for a pod; returns what the kubelet would send for it."""
        requests = sorted({request for request, _ in devices})
        claim = self.api.create(
            claim_manifest(
                name,
                namespace=namespace,
                version=self.version,
                requests=requests,
                device_class=self.device_class,
            )
        )
        results = []
        for request, device in devices:
            result: dict[str, Any] = {
                "request": request,
                "driver": driver or self.driver_name,
                "pool": pool or self.node_name,
                "device": device,
            }
            if admin_access:
                result["adminAccess"] = True
            results.append(result)
        self.api.patch(
            "ResourceClaim",
            name,
            {"status": allocated_status(results, node_name=self.node_name, pod_name=f"{name}-pod")},
            namespace=namespace,
            subresource="status",
        )
        return KubeletClaim(namespace, claim["metadata"]["uid"], name)

    def claim(self, ref: KubeletClaim) -> dict[str, Any] | None:
        return self.api.get("ResourceClaim", ref.name, namespace=ref.namespace)

    def finalizers(self, ref: KubeletClaim) -> list[str]:
        claim = self.claim(ref)
        return list((claim or {}).get("metadata", {}).get("finalizers") or [])

    def delete_claim(self, ref: KubeletClaim) -> None:
        self.api.delete("ResourceClaim", ref.name, namespace=ref.namespace)

    def slices(self) -> list[dict[str, Any]]:
        return self.api.list("ResourceSlice", field_selector=f"spec.nodeName={self.node_name}")
