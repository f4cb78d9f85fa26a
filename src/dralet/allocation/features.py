"""Which DRA scheduling features a Kubernetes release has on by default.

Owns the feature-gate facts the allocator depends on, per release. Source:
k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go — DRAPartitionableDevices
(alpha 1.33, beta and on 1.36), DRADeviceTaints (alpha 1.33, beta and on 1.36, GA
1.37), DRAConsumableCapacity (alpha 1.34, beta and on 1.36), DRADeviceBindingConditions
(alpha 1.34, beta and on 1.36), DRADeviceTaintRules (alpha 1.35, beta but off 1.36, GA
and on 1.37). Alpha gates are off by default, so a dry run for 1.35
or older behaves as if these features did not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Features"]

_ON_FROM = {
    "partitionable_devices": 36,
    "device_taints": 36,
    "consumable_capacity": 36,
    "binding_conditions": 36,
    "device_taint_rules": 37,
}


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

    @classmethod
    def for_release(cls, kubernetes_version: str) -> Features:
        """The defaults of ``kubernetes_version`` (e.g. ``"1.37"``)."""
        minor = int(kubernetes_version.split(".")[1])
        return cls(**{name: minor >= since for name, since in _ON_FROM.items()})

    @classmethod
    def all_on(cls) -> Features:
        return cls(**dict.fromkeys(_ON_FROM, True))
