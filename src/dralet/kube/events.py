"""Kubernetes Events about the driver's node: what an operator sees in ``kubectl get events``.

Used for conditions a person must act on (a corrupt checkpoint that makes the driver
fail closed); the Event's involved object is the Node the driver runs on.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from dralet.kube import resources

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["NodeEvents"]

EVENT_NAMESPACE = "default"
"""Where Events about cluster-scoped objects (Nodes) go, as the kubelet's do."""


class NodeEvents:
    """Records Events about one node on behalf of one driver."""

    def __init__(self, client: KubeClient, *, driver: str, node_name: str) -> None:
        self.client = client
        self.driver = driver
        self.node_name = node_name

    async def warn(self, reason: str, message: str) -> None:
        """Create a Warning Event about the node (reason is CamelCase, e.g. CheckpointCorrupt)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = await self.client.get(resources.NODES, self.node_name)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{self.node_name}.{uuid.uuid4().hex[:16]}",
                "namespace": EVENT_NAMESPACE,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": node.get("metadata", {}).get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": self.driver, "host": self.node_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.driver,
            "reportingInstance": self.node_name,
        }
        await self.client.create(resources.EVENTS, event, namespace=EVENT_NAMESPACE)
