"""Which optional ResourceSlice fields a cluster serves, by release and feature gate.

A field behind a feature gate that is off is dropped by the API server without an
error, so a driver that writes it would publish something else than it meant and, since
the live slice then differs from the wanted one, rewrite its slices for ever. The
publisher therefore writes such a field only where the release enables its gate by
default, or where the operator says the cluster enables it.

The releases that turn each gate on, or lock it on, are ``dralet.gates``'. Field names:
k8s.io/api v0.37.2 ``resource/v1/types.go`` (no field added or removed in v0.38.0-beta.0).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dralet.gates import gate

__all__ = [
    "FEATURES",
    "Feature",
    "parse_server_version",
    "served_features",
    "strip_device",
]


@dataclass(frozen=True)
class Feature:
    """One optional group of ResourceSlice fields and the gate that serves it."""

    gate: str
    device_fields: tuple[str, ...] = ()
    capacity_fields: tuple[str, ...] = ()
    spec_fields: tuple[str, ...] = ()
    what: str = ""

    @property
    def on_by_default_since(self) -> tuple[int, int] | None:
        on = gate(self.gate).on_from
        return None if on is None else (1, on)

    @property
    def locked_on_since(self) -> tuple[int, int] | None:
        """The release from which the gate is locked on (GA, LockToDefault)."""
        locked = gate(self.gate).locked_from
        return None if locked is None else (1, locked)


FEATURES: tuple[Feature, ...] = (
    Feature(
        gate="DRADeviceTaints",
        device_fields=("taints",),
        what="device taints",
    ),
    Feature(
        gate="DRAPartitionableDevices",
        device_fields=("consumesCounters",),
        spec_fields=("sharedCounters",),
        what="shared counters (partitionable devices)",
    ),
    Feature(
        gate="DRAConsumableCapacity",
        device_fields=("allowMultipleAllocations",),
        capacity_fields=("requestPolicy",),
        what="consumable capacity",
    ),
    Feature(
        gate="DRADeviceBindingConditions",
        device_fields=("bindsToNode", "bindingConditions", "bindingFailureConditions"),
        what="binding conditions",
    ),
)

_MINOR = re.compile(r"\d+")


def parse_server_version(version_info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) from the server's ``/version`` answer; None if it cannot be read.

    Managed clusters report minors such as ``"34+"``: the digits are what counts.
    """
    major = _MINOR.match(str(version_info.get("major") or ""))
    minor = _MINOR.match(str(version_info.get("minor") or ""))
    if major is None or minor is None:
        return None
    return int(major.group()), int(minor.group())


def served_features(
    server: tuple[int, int] | None, gates: Mapping[str, bool] | None = None
) -> frozenset[str]:
    """The gates of ``FEATURES`` the cluster serves: on by default in its release, unless
    ``gates`` (what the operator says the cluster sets) says otherwise, which a gate its
    release locks on ignores."""
    served = set()
    for feature in FEATURES:
        explicit = (gates or {}).get(feature.gate)
        locked = feature.locked_on_since
        if server is not None and locked is not None and server >= locked:
            on = True
        elif explicit is None:
            since = feature.on_by_default_since
            on = server is not None and since is not None and server >= since
        else:
            on = explicit
        if on:
            served.add(feature.gate)
    return frozenset(served)


def strip_device(
    device: Mapping[str, Any], served: frozenset[str]
) -> tuple[dict[str, Any], set[str]]:
    """``device`` (canonical JSON) without the fields of features the cluster does not
    serve, and the gates of the features that were removed."""
    out = copy.deepcopy(dict(device))
    removed: set[str] = set()
    for feature in FEATURES:
        if feature.gate in served:
            continue
        for name in feature.device_fields:
            if name in out:
                del out[name]
                removed.add(feature.gate)
        for capacity in (out.get("capacity") or {}).values():
            for name in feature.capacity_fields:
                if isinstance(capacity, dict) and name in capacity:
                    del capacity[name]
                    removed.add(feature.gate)
    return out, removed
