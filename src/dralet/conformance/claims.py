"""ResourceClaims for the cases, allocated and reserved as the scheduler leaves them, and
the devices the driver published for the node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dralet import cluster
from dralet import kubelet as emulator
from dralet.kube import resources, versions
from dralet.kube.client import KubeClient

__all__ = ["ApiClaimFactory", "ClaimFactory", "Published"]

REQUEST_PREFIX = "r"


@dataclass(frozen=True)
class Published:
    pool: str
    devices: tuple[str, ...]


class ClaimFactory(Protocol):
    async def create(
        self, name: str, *, devices: Sequence[str], driver: str, pool: str
    ) -> emulator.KubeletClaim:
        """A claim whose request ``r{i}`` is allocated ``devices[i]`` of ``pool``."""
        ...

    async def delete(self, claim: emulator.KubeletClaim) -> None: ...

    async def published(self, driver: str, node_name: str) -> Published | None:
        """The first pool with devices that ``driver`` published for ``node_name``."""
        ...


def request_names(count: int) -> list[str]:
    return [f"{REQUEST_PREFIX}{i}" for i in range(count)]


@dataclass
class ApiClaimFactory:
    """``ClaimFactory`` on the API server through ``dralet.kube`` (stand-in or cluster)."""

    client: KubeClient
    node_name: str
    namespace: str = "default"
    device_class: str = "dralet-conformance"
    """Named in the requests; the suite never schedules, so it need not exist."""
    _version: str = field(default="", repr=False)

    async def _negotiate(self) -> str:
        if not self._version:
            self._version = await versions.negotiate_resource_version(self.client)
        return self._version

    async def create(
        self, name: str, *, devices: Sequence[str], driver: str, pool: str
    ) -> emulator.KubeletClaim:
        version = await self._negotiate()
        resource = resources.resource_claims(version)
        requests = request_names(len(devices))
        created = await self.client.create(
            resource,
            cluster.claim_manifest(
                name,
                namespace=self.namespace,
                version=version,
                requests=requests,
                device_class=self.device_class,
            ),
            namespace=self.namespace,
        )
        results = [
            {"request": r, "driver": driver, "pool": pool, "device": d}
            for r, d in zip(requests, devices, strict=True)
        ]
        status = cluster.allocated_status(results, node_name=self.node_name, pod_name=f"{name}-pod")
        await self.client.merge_patch(
            resource, name, {"status": status}, namespace=self.namespace, subresource="status"
        )
        return emulator.KubeletClaim(self.namespace, created["metadata"]["uid"], name)

    async def delete(self, claim: emulator.KubeletClaim) -> None:
        resource = resources.resource_claims(await self._negotiate())
        await self.client.delete(resource, claim.name, namespace=claim.namespace)

    async def published(self, driver: str, node_name: str) -> Published | None:
        listed = await self.client.list(resources.resource_slices(await self._negotiate()))
        for item in listed.get("items") or []:
            spec = item.get("spec") or {}
            if spec.get("driver") != driver or spec.get("nodeName") != node_name:
                continue
            names = tuple(d["name"] for d in spec.get("devices") or () if d.get("name"))
            if names:
                return Published(str((spec.get("pool") or {}).get("name", "")), names)
        return None
