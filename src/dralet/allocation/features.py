"""Which DRA scheduling features a Kubernetes release has on by default.

The release facts (on-by-default and locked releases of each gate) are ``dralet.gates``';
this module maps them onto the allocator's ``Features``. Alpha gates are off by default, so
a dry run for 1.35 or older behaves as if these features did not exist; a gate a cluster
sets differently is given with ``with_gates``. The DynamicResourceAllocation gate is
removed in 1.38 (DRA is always on), so it is no gate here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dralet import gates as dra_gates

__all__ = ["GATES", "Features", "GateError", "LockedGateError", "UnknownGateError"]

GATES = {
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "binding_conditions",
    "DRADeviceTaintRules": "device_taint_rules",
    "DRAListTypeAttributes": "list_type_attributes",
}
"""Upstream gate name -> field of ``Features``."""

_ON_FROM = {
    field: on for name, field in GATES.items() if (on := dra_gates.gate(name).on_from) is not None
}
"""Minor release from which a gate is on by default; a gate not here is off in every release."""

_LOCKED_FROM = {
    field: locked
    for name, field in GATES.items()
    if (locked := dra_gates.gate(name).locked_from) is not None
}
"""Minor release from which a gate is locked to its default (GA, LockToDefault)."""


class GateError(ValueError):
    """A feature gate setting the simulated scheduler cannot take."""


class UnknownGateError(GateError):
    """A feature gate the simulated scheduler does not know."""


class LockedGateError(GateError):
    """A feature gate set against the default its release locks it to."""


@dataclass(frozen=True)
class Features:
    """DRA feature gates as the simulated scheduler has them."""

    partitionable_devices: bool = False
    """Shared counters, ``consumesCounters`` and per-device node selection."""
    device_taints: bool = False
    """Device taints keep devices from requests that do not tolerate them."""
    consumable_capacity: bool = False
    """``allowMultipleAllocations``, capacity requests and ``distinctAttribute``."""
    binding_conditions: bool = False
    """Devices with binding conditions are allocatable (searched last)."""
    device_taint_rules: bool = False
    """DeviceTaintRules add their taints to the devices they select."""
    list_type_attributes: bool = False
    """Attributes may hold lists: ``includes()`` in CEL, set semantics in matchAttribute
    (a common element) and distinctAttribute (pairwise disjoint)."""
    locked: frozenset[str] = frozenset()
    """Fields whose gate the release locks to its default: ``with_gates`` refuses to
    change them, as kube-scheduler refuses to start."""

    @classmethod
    def for_release(cls, kubernetes_version: str) -> Features:
        """The defaults of ``kubernetes_version`` (e.g. ``"1.37"``)."""
        minor = int(kubernetes_version.split(".")[1])
        locked = frozenset(name for name, since in _LOCKED_FROM.items() if minor >= since)
        defaults: dict[str, Any] = {name: minor >= since for name, since in _ON_FROM.items()}
        return cls(**defaults, locked=locked)

    @classmethod
    def all_on(cls) -> Features:
        """Every gate on by default in the newest release."""
        on: dict[str, Any] = dict.fromkeys(_ON_FROM, True)
        return cls(**on)

    def with_gates(self, gates: Mapping[str, bool]) -> Features:
        """These features with some gates set explicitly (upstream names, e.g.
        ``{"DRAListTypeAttributes": True}``)."""
        unknown = sorted(set(gates) - set(GATES))
        if unknown:
            raise UnknownGateError(
                f"unknown feature gate {unknown[0]} (known: {', '.join(sorted(GATES))})"
            )
        for gate, on in sorted(gates.items()):
            name = GATES[gate]
            if name in self.locked and on != getattr(self, name):
                raise LockedGateError(
                    f"feature gate {gate} is locked to {str(getattr(self, name)).lower()} "
                    "in this release and cannot be set"
                )
        changed: dict[str, Any] = {GATES[gate]: on for gate, on in gates.items()}
        return replace(self, **changed)
