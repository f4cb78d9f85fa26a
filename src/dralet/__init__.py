"""dralet: a toolkit for Kubernetes DRA node drivers that cannot leak devices.

This module is the public API. A driver author implements ``ClaimBackend`` (list
devices, prepare a claim's devices returning ``ContainerEdits``, release them) and hands it
to ``run`` (blocking) or ``Driver`` (an async handle) with ``Settings``; dralet owns
registration, the kubelet's DRA gRPC services, the crash-safe checkpoint, CDI files,
recovery, garbage collection, ResourceSlices, the claim finalizer, health and metrics.
``help(dralet.run)`` is the whole author contract, packaging as a ``dralet run
--driver`` plugin included. A driver needs nothing else from dralet: the name rules
(``qualified_name_problem``, ``dns_label_problem``), quantities (``parse_quantity``),
its YAML configuration file (``parse_yaml_config``) and device-node watches
(``Inotify``) are here too; its tests run ``dralet conformance`` against it with
``dralet.testing.check_backend``.

The public names load on first use (PEP 562), so the command-line tools under
``dralet.*`` (``dralet validate``, ``dralet simulate``) never pay for the driver's gRPC
and aiohttp runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dralet.allocation.quantity import QuantityError, format_quantity, parse_quantity
    from dralet.cdi.spec import ContainerEdits, DeviceNode, Hook, Mount
    from dralet.errors import ClaimError, PermanentError, TemporaryError
    from dralet.fsutil import FileLock, atomic_write, remove_file
    from dralet.inotify import Inotify, InotifyEvents, InotifyUnavailableError
    from dralet.kubenames import (
        ATTRIBUTE_VALUE_MAX_LENGTH,
        DNS_LABEL_MAX_LENGTH,
        dns_label_problem,
        qualified_name_problem,
    )
    from dralet.metrics import DriverMetrics
    from dralet.node.backend import (
        AllocatedDevice,
        AttributeValue,
        ClaimAllocation,
        ClaimBackend,
        ClaimRef,
        ClaimUID,
        Device,
        DeviceConfig,
        DeviceHealth,
        DeviceMetadata,
        DeviceStatus,
        HealthNotSupported,
        HealthStatus,
        HeldDevice,
        NetworkData,
        PartialPrepareError,
        PreparedDevice,
        Version,
    )
    from dralet.node.claims.calls import ClaimSource
    from dralet.node.config import ApiSettings, Settings
    from dralet.node.devices import (
        Capacity,
        CounterConsumption,
        CounterSet,
        CounterSetSource,
        DeviceTaint,
        QuantityRange,
        RequestPolicy,
        TaintEffect,
    )
    from dralet.node.driver import Driver, run
    from dralet.node.factory import (
        BackendFactory,
        DriverConfig,
        DriverLoadError,
        DriverStartError,
    )
    from dralet.node.publisher import PublisherSettings
    from dralet.node.settings import DriverSettings
    from dralet.validation.configfile import YamlConfigError, parse_yaml_config

_SOURCES: dict[str, str] = {
    "QuantityError": "dralet.allocation.quantity",
    "format_quantity": "dralet.allocation.quantity",
    "parse_quantity": "dralet.allocation.quantity",
    "ContainerEdits": "dralet.cdi.spec",
    "DeviceNode": "dralet.cdi.spec",
    "Hook": "dralet.cdi.spec",
    "Mount": "dralet.cdi.spec",
    "ClaimError": "dralet.errors",
    "PermanentError": "dralet.errors",
    "TemporaryError": "dralet.errors",
    "FileLock": "dralet.fsutil",
    "atomic_write": "dralet.fsutil",
    "remove_file": "dralet.fsutil",
    "Inotify": "dralet.inotify",
    "InotifyEvents": "dralet.inotify",
    "InotifyUnavailableError": "dralet.inotify",
    "ATTRIBUTE_VALUE_MAX_LENGTH": "dralet.kubenames",
    "DNS_LABEL_MAX_LENGTH": "dralet.kubenames",
    "dns_label_problem": "dralet.kubenames",
    "qualified_name_problem": "dralet.kubenames",
    "DriverMetrics": "dralet.metrics",
    "AllocatedDevice": "dralet.node.backend",
    "AttributeValue": "dralet.node.backend",
    "ClaimAllocation": "dralet.node.backend",
    "ClaimBackend": "dralet.node.backend",
    "ClaimRef": "dralet.node.backend",
    "ClaimUID": "dralet.node.backend",
    "Device": "dralet.node.backend",
    "DeviceConfig": "dralet.node.backend",
    "PartialPrepareError": "dralet.node.backend",
    "DeviceHealth": "dralet.node.backend",
    "HealthNotSupported": "dralet.node.backend",
    "HealthStatus": "dralet.node.backend",
    "HeldDevice": "dralet.node.backend",
    "PreparedDevice": "dralet.node.backend",
    "DeviceStatus": "dralet.node.backend",
    "DeviceMetadata": "dralet.node.backend",
    "NetworkData": "dralet.node.backend",
    "Version": "dralet.node.backend",
    "ClaimSource": "dralet.node.claims.calls",
    "Capacity": "dralet.node.devices",
    "CounterConsumption": "dralet.node.devices",
    "CounterSet": "dralet.node.devices",
    "CounterSetSource": "dralet.node.devices",
    "DeviceTaint": "dralet.node.devices",
    "QuantityRange": "dralet.node.devices",
    "RequestPolicy": "dralet.node.devices",
    "TaintEffect": "dralet.node.devices",
    "ApiSettings": "dralet.node.config",
    "Settings": "dralet.node.config",
    "Driver": "dralet.node.driver",
    "run": "dralet.node.driver",
    "BackendFactory": "dralet.node.factory",
    "DriverConfig": "dralet.node.factory",
    "DriverLoadError": "dralet.node.factory",
    "DriverStartError": "dralet.node.factory",
    "PublisherSettings": "dralet.node.publisher",
    "DriverSettings": "dralet.node.settings",
    "YamlConfigError": "dralet.validation.configfile",
    "parse_yaml_config": "dralet.validation.configfile",
}
"""Where each public name is defined."""

__all__ = [
    "ATTRIBUTE_VALUE_MAX_LENGTH",
    "DNS_LABEL_MAX_LENGTH",
    "AllocatedDevice",
    "ApiSettings",
    "AttributeValue",
    "BackendFactory",
    "Capacity",
    "ClaimAllocation",
    "ClaimBackend",
    "ClaimError",
    "ClaimRef",
    "ClaimSource",
    "ClaimUID",
    "ContainerEdits",
    "CounterConsumption",
    "CounterSet",
    "CounterSetSource",
    "Device",
    "DeviceConfig",
    "DeviceHealth",
    "DeviceMetadata",
    "DeviceNode",
    "DeviceStatus",
    "DeviceTaint",
    "Driver",
    "DriverConfig",
    "DriverLoadError",
    "DriverMetrics",
    "DriverSettings",
    "DriverStartError",
    "FileLock",
    "HealthNotSupported",
    "HealthStatus",
    "HeldDevice",
    "Hook",
    "Inotify",
    "InotifyEvents",
    "InotifyUnavailableError",
    "Mount",
    "NetworkData",
    "PartialPrepareError",
    "PermanentError",
    "PreparedDevice",
    "PublisherSettings",
    "QuantityError",
    "QuantityRange",
    "RequestPolicy",
    "Settings",
    "TaintEffect",
    "TemporaryError",
    "Version",
    "YamlConfigError",
    "atomic_write",
    "dns_label_problem",
    "format_quantity",
    "parse_quantity",
    "parse_yaml_config",
    "qualified_name_problem",
    "remove_file",
    "run",
]


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module 'dralet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
