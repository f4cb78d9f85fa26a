"""Discovery documents: ``/version``, ``/api``, ``/apis`` and each group version's resources."""

from __future__ import annotations

from collections.abc import Sequence

from dralet.apiserver.errors import JSONObject
from dralet.apiserver.kinds import KINDS, RESOURCE_GROUP, major_minor

__all__ = ["api_group", "core_versions", "resource_list", "version_info"]


def version_info(kubernetes_version: str) -> JSONObject:
    """The ``/version`` answer of the release played."""
    major, minor = major_minor(kubernetes_version)
    return {
        "major": str(major),
        "minor": str(minor),
        "gitVersion": f"v{major}.{minor}.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_group(versions: Sequence[str]) -> JSONObject:
    """resource.k8s.io with ``versions`` (newest first, the preferred one)."""
    return {
        "name": RESOURCE_GROUP,
        "versions": [{"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v} for v in versions],
        "preferredVersion": {
            "groupVersion": f"{RESOURCE_GROUP}/{versions[0]}",
            "version": versions[0],
        },
    }


def resource_list(group: str, version: str) -> JSONObject:
    """The ``APIResourceList`` of one group version: the kinds served and their verbs."""
    entries: list[JSONObject] = []
    for kind in KINDS:
        if kind.group != group:
            continue
        entries.append(
            {
                "name": kind.plural,
                "singularName": kind.singular,
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": [
                    "create",
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "update",
                    "watch",
                ],
                **({"shortNames": list(kind.short_names)} if kind.short_names else {}),
            }
        )
        if kind.status_subresource:
            entries.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def core_versions(url: str) -> JSONObject:
    """The ``/api`` answer of a server listening at ``url``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": url.removeprefix("http://")}
        ],
    }
