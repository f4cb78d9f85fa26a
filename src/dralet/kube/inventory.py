"""Reading the cluster's DRA objects in one call, for ``dralet audit`` and ``simulate``.

Lists ResourceClaims (all namespaces), ResourceSlices (optionally one node's or one
driver's) and DeviceClasses at the newest resource.k8s.io version the server serves,
as JSON dicts in that version's shape, each with ``apiVersion`` and ``kind``; for
``simulate`` also what else the scheduler reads: DeviceTaintRules (none where the server
does not serve them), Nodes and Pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dralet.kube import resources, status, versions

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = [
    "ResourceInventory",
    "list_device_classes",
    "list_device_taint_rules",
    "list_resource_claims",
    "list_resource_slices",
    "read_inventory",
    "slice_field_selector",
]


@dataclass(frozen=True)
class ResourceInventory:
    """The DRA objects of a cluster at one moment, in ``api_version``'s shape."""

    api_version: str
    """The resource.k8s.io version the objects were read in."""
    claims: tuple[Mapping[str, Any], ...]
    slices: tuple[Mapping[str, Any], ...]
    device_classes: tuple[Mapping[str, Any], ...]
    taint_rules: tuple[Mapping[str, Any], ...] = ()
    """DeviceTaintRules (read with ``scheduling``)."""
    nodes: tuple[Mapping[str, Any], ...] = ()
    """Nodes (read with ``scheduling``)."""
    pods: tuple[Mapping[str, Any], ...] = ()
    """Pods of every namespace (read with ``scheduling``)."""


def slice_field_selector(*, node_name: str | None = None, driver: str | None = None) -> str:
    """The field selector for the ResourceSlices of one node and/or one driver."""
    parts = []
    if node_name:
        parts.append(f"spec.nodeName={node_name}")
    if driver:
        parts.append(f"spec.driver={driver}")
    return ",".join(parts)


async def _version(client: KubeClient, version: str | None) -> str:
    return version or await versions.negotiate_resource_version(client)


async def list_resource_claims(
    client: KubeClient, *, version: str | None = None
) -> list[dict[str, Any]]:
    """Every ResourceClaim in every namespace."""
    resource = resources.resource_claims(await _version(client, version))
    return list((await client.list(resource)).get("items") or [])


async def list_resource_slices(
    client: KubeClient,
    *,
    node_name: str | None = None,
    driver: str | None = None,
    version: str | None = None,
) -> list[dict[str, Any]]:
    """ResourceSlices, optionally only those of ``node_name`` and/or ``driver``."""
    resource = resources.resource_slices(await _version(client, version))
    selector = slice_field_selector(node_name=node_name, driver=driver)
    return list((await client.list(resource, field_selector=selector)).get("items") or [])


async def list_device_classes(
    client: KubeClient, *, version: str | None = None
) -> list[dict[str, Any]]:
    resource = resources.device_classes(await _version(client, version))
    return list((await client.list(resource)).get("items") or [])


async def list_device_taint_rules(
    client: KubeClient, *, version: str | None = None
) -> list[dict[str, Any]]:
    """Every DeviceTaintRule; none where the server does not serve the kind."""
    return await _list_served(client, resources.device_taint_rules(await _version(client, version)))


async def _list_served(client: KubeClient, resource: resources.Resource) -> list[dict[str, Any]]:
    """Every object of ``resource``; none where the server does not serve it (the API
    stand-in serves no Pods, an older server no DeviceTaintRules)."""
    try:
        listed = await client.list(resource)
    except status.ApiError as error:
        if error.not_found:
            return []
        raise
    return list(listed.get("items") or [])


async def read_inventory(
    client: KubeClient,
    *,
    node_name: str | None = None,
    driver: str | None = None,
    scheduling: bool = False,
) -> ResourceInventory:
    """Claims, slices and device classes, read at the negotiated version; with
    ``scheduling`` also DeviceTaintRules, Nodes and Pods."""
    version = await versions.negotiate_resource_version(client)
    if scheduling:
        return ResourceInventory(
            api_version=version,
            claims=tuple(await list_resource_claims(client, version=version)),
            slices=tuple(
                await list_resource_slices(
                    client, node_name=node_name, driver=driver, version=version
                )
            ),
            device_classes=tuple(await list_device_classes(client, version=version)),
            taint_rules=tuple(await list_device_taint_rules(client, version=version)),
            nodes=tuple(await _list_served(client, resources.NODES)),
            pods=tuple(await _list_served(client, resources.PODS)),
        )
    return ResourceInventory(
        api_version=version,
        claims=tuple(await list_resource_claims(client, version=version)),
        slices=tuple(
            await list_resource_slices(client, node_name=node_name, driver=driver, version=version)
        ),
        device_classes=tuple(await list_device_classes(client, version=version)),
    )
