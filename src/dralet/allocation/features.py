"""Which DRA scheduling features a Kubernetes release has on by default.

Owns the feature-gate facts the allocator depends on, per release. Source:
k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go — DRAPartitionableDevices
(alpha 1.33, beta and on 1.36), DRADeviceTaints (alpha 1.33, beta and on 1.36, GA
1.37), DRAConsumableCapacity (alpha 1.34, beta and on 1.36), DRADeviceBindingConditions
(alpha 1.34, beta and on 1.36), DRADeviceTaintRules (alpha 1.35, beta but off 1.36, GA
and on 1.37), DRAListTypeAttributes (alpha and off in 1.36 and 1.37). Alpha gates are off
by default, so a dry run for 1.35 or older behaves as if these features did not exist; a
gate a cluster sets differently is given with ``with_gates``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

__all__ = ["GATES", "Features", "UnknownGateError"]

_ON_FROM = {
    "partitionable_devices": 36,
    "device_taints": 36,
    "consumable_capacity": 36,
    "binding_conditions": 36,
    "device_taint_rules": 37,
}
"""Minor release from which a gate is on by default; a gate not here is off in every release."""

GATES = {
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "binding_conditions",
    "DRADeviceTaintRules": "device_taint_rules",
    "DRAListTypeAttributes": "list_type_attributes",
}
"""Upstream gate name -> field of ``Features``."""


class UnknownGateError(ValueError):
    """A feature gate the simulated scheduler does not know."""


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

    @classmethod
    def for_release(cls, kubernetes_version: str) -> Features:
        """The defaults of ``kubernetes_version`` (e.g. ``"1.37"``)."""
        minor = int(kubernetes_version.split(".")[1])
        return cls(**{name: minor >= since for name, since in _ON_FROM.items()})

    @classmethod
    def all_on(cls) -> Features:
        """Every gate on by default in the newest release."""
        return cls(**dict.fromkeys(_ON_FROM, True))

    def with_gates(self, gates: Mapping[str, bool]) -> Features:
        """These features with some gates set explicitly (upstream names, e.g.
        ``{"DRAListTypeAttributes": True}``)."""
        unknown = sorted(set(gates) - set(GATES))
        if unknown:
            raise UnknownGateError(
                f"unknown feature gate {unknown[0]} (known: {', '.join(sorted(GATES))})"
            )
        return replace(self, **{GATES[gate]: on for gate, on in gates.items()})
