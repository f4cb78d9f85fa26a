"""dralet: a toolkit for Kubernetes DRA node drivers that cannot leak devices.

This module is the public API. A driver author implements ``DeviceBackend`` (list
devices, prepare one for a claim returning ``ContainerEdits``, release it) and hands it
to ``Driver`` with ``DriverSettings``; dralet owns registration, the kubelet's DRA gRPC
services, the crash-safe checkpoint, CDI files, recovery, garbage collection,
ResourceSlices, the claim finalizer, health and metrics.
"""

from dralet.cdi.spec import ContainerEdits, DeviceNode, Hook, Mount
from dralet.errors import ClaimError, PermanentError, TemporaryError
from dralet.fsutil import FileLock, atomic_write
from dralet.metrics import DriverMetrics
from dralet.node.backend import (
    AllocatedDevice,
    AttributeValue,
    ClaimRef,
    ClaimUID,
    Device,
    DeviceBackend,
    DeviceHealth,
    HealthStatus,
    PreparedDevice,
    Version,
)
from dralet.node.claims.source import ClaimSource
from dralet.node.runner import Driver
from dralet.node.settings import DriverSettings

__all__ = [
    "AllocatedDevice",
    "AttributeValue",
    "ClaimError",
    "ClaimRef",
    "ClaimSource",
    "ClaimUID",
    "ContainerEdits",
    "Device",
    "DeviceBackend",
    "DeviceHealth",
    "DeviceNode",
    "Driver",
    "DriverMetrics",
    "DriverSettings",
    "FileLock",
    "HealthStatus",
    "Hook",
    "Mount",
    "PermanentError",
    "PreparedDevice",
    "TemporaryError",
    "Version",
    "atomic_write",
]
