"""The registration cases over a node's ResourceSlices of one driver: pure.

A pool is complete when its newest generation has ``resourceSliceCount`` slices
(k8s.io/api@v0.37.2 resource/v1/types.go, ResourcePool: consumers must ignore a pool
whose slices at the highest generation are fewer than that count). Slices of an older
generation may linger while the driver replaces them; once complete they should go.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dralet.validation import documents, engine, targets
from dralet.validation.diagnostics import Severity

__all__ = ["NodeSlices", "node_slices", "validate"]


@dataclass(frozen=True)
class NodeSlices:
    pools: dict[str, list[dict[str, Any]]]
    """Pool name -> the node's slices of it."""

    def incomplete(self) -> list[str]:
        """One line per pool whose newest generation lacks slices."""
        problems = []
        for name, items in sorted(self.pools.items()):
            newest = max(_pool(s).get("generation", 0) for s in items)
            current = [s for s in items if _pool(s).get("generation", 0) == newest]
            want = {_pool(s).get("resourceSliceCount", 0) for s in current}
            if want != {len(current)}:
                problems.append(
                    f"pool {name!r} generation {newest}: {len(current)} slice(s), "
                    f"resourceSliceCount {sorted(want)}"
                )
        return problems

    def stale(self) -> list[str]:
        """Names of slices of an older generation than their pool's newest."""
        names = []
        for items in self.pools.values():
            newest = max(_pool(s).get("generation", 0) for s in items)
            names += [
                s["metadata"]["name"] for s in items if _pool(s).get("generation", 0) < newest
            ]
        return sorted(names)

    def devices(self) -> dict[str, dict[str, Any]]:
        """Device name -> its attributes, over the newest generation of every pool."""
        found: dict[str, dict[str, Any]] = {}
        for items in self.pools.values():
            newest = max(_pool(s).get("generation", 0) for s in items)
            for s in items:
                if _pool(s).get("generation", 0) != newest:
                    continue
                for device in (s.get("spec") or {}).get("devices") or []:
                    # resource.k8s.io/v1beta1 nests a device's fields under ``basic``.
                    fields = device.get("basic") or device
                    found[str(device.get("name"))] = dict(fields.get("attributes") or {})
        return found


def _pool(slice_: Mapping[str, Any]) -> dict[str, Any]:
    return dict((slice_.get("spec") or {}).get("pool") or {})


def node_slices(items: Sequence[Mapping[str, Any]], *, driver: str, node: str) -> NodeSlices:
    pools: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        spec = item.get("spec") or {}
        if spec.get("driver") == driver and spec.get("nodeName") == node:
            pools.setdefault(str(_pool(item).get("name", "")), []).append(dict(item))
    return NodeSlices(pools)


def validate(items: Sequence[Mapping[str, Any]], *, release: str) -> list[str]:
    """The errors ``dralet validate`` finds in each slice for ``release`` (``1.37``).

    Only what a manifest would carry is checked: server-set metadata is left out."""
    sources = []
    for item in items:
        metadata = item.get("metadata") or {}
        manifest = {
            "apiVersion": item.get("apiVersion"),
            "kind": item.get("kind"),
            "metadata": {k: metadata[k] for k in ("name", "labels") if k in metadata},
            "spec": item.get("spec"),
        }
        sources.append(documents.Source(str(metadata.get("name")), json.dumps(manifest)))
    report = engine.validate_sources(sources, target=targets.Target(release))
    return [
        f"{d.file}: {d.rule} {d.field} {d.message}".replace("  ", " ")
        for d in report.diagnostics
        if d.severity is Severity.ERROR
    ]
