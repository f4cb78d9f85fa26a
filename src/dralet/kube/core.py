"""Core v1 kinds that workloads run in (Namespaces), and the server's ``/version``.

Used by ``dralet conformance --cluster``, which makes its own namespace and judges
ResourceSlices against the server's release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dralet.kube import resources

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["NAMESPACES", "server_minor"]

NAMESPACES = resources.Resource(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False
)


async def server_minor(client: KubeClient) -> str:
    """The server's release as ``MAJOR.MINOR`` (``1.37``), from ``/version``.

    ``minor`` may carry a ``+`` suffix on managed clusters (``"37+"``), so digits are
    kept only; ``gitVersion`` is the fallback when ``minor`` is empty.
    """
    info = await client.request("GET", "/version")
    major = "".join(c for c in str(info.get("major") or "") if c.isdigit())
    minor = "".join(c for c in str(info.get("minor") or "") if c.isdigit())
    if not (major and minor):
        parts = str(info.get("gitVersion") or "").lstrip("v").split(".")
        major, minor = [*parts, "", ""][:2]
    return f"{major}.{minor}"
