"""A node kept Ready on a real API server, as a kubelet (or kwok) keeps it."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from dralet import kube
from dralet.kube import resources

__all__ = ["HEARTBEAT_INTERVAL", "NodeHeartbeat"]

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
