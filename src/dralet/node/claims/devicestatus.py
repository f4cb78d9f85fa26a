"""The claim's ``status.devices`` entries this driver writes after a prepare: one per
prepared device, keyed as the API keys the list (driver, pool, device, shareID), with the
backend's conditions, data and network data, or a ``Ready`` condition that is True.

The limits are the API server's (k8s.io/api resource/v1 types.go, 1.37:
AllocatedDeviceStatusMaxConditions 8, data at most 10 Ki, NetworkDeviceDataMaxIPs 16,
interface name 256 and hardware address 128 bytes): an entry past them is a backend bug
that would fail the whole write, so it is refused here with the device named.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import DeviceStatus, NetworkData, PreparedDevice

__all__ = [
    "MAX_CONDITIONS",
    "MAX_DATA_BYTES",
    "DeviceStatusError",
    "entries",
    "network_data_json",
]

MAX_CONDITIONS = 8
MAX_DATA_BYTES = 10 * 1024
MAX_IPS = 16
MAX_INTERFACE_NAME = 256
MAX_HARDWARE_ADDRESS = 128
READY = "Ready"
"""The condition upstream's API documentation names for a device configured as asked."""


class DeviceStatusError(ValueError):
    """A backend's ``DeviceStatus`` the API server would refuse."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(status: DeviceStatus | None, generation: int, now: str) -> list[dict[str, Any]]:
    given = list(status.conditions) if status is not None else []
    if not given:
        given = [{"type": READY, "status": "True", "reason": "Prepared", "message": "prepared"}]
    if len(given) > MAX_CONDITIONS:
        raise DeviceStatusError(f"{len(given)} conditions: at most {MAX_CONDITIONS}")
    out = []
    for condition in given:
        entry = {"lastTransitionTime": now, **condition}
        if generation:
            entry.setdefault("observedGeneration", generation)
        missing = [k for k in ("type", "status", "reason") if not entry.get(k)]
        if missing:
            raise DeviceStatusError(f"condition {condition!r} lacks {', '.join(missing)}")
        entry.setdefault("message", "")
        out.append(entry)
    return out


def network_data_json(network: NetworkData | None) -> dict[str, Any] | None:
    """``networkData`` in API form (as status.devices and device metadata hold it);
    raises ``DeviceStatusError`` past the API server's limits."""
    if network is None:
        return None
    if len(network.interface_name.encode()) > MAX_INTERFACE_NAME:
        raise DeviceStatusError(f"interface name longer than {MAX_INTERFACE_NAME} bytes")
    if len(network.hardware_address.encode()) > MAX_HARDWARE_ADDRESS:
        raise DeviceStatusError(f"hardware address longer than {MAX_HARDWARE_ADDRESS} bytes")
    if len(network.ips) > MAX_IPS:
        raise DeviceStatusError(f"{len(network.ips)} IPs: at most {MAX_IPS}")
    for ip in network.ips:
        try:
            ipaddress.ip_interface(ip)
        except ValueError:
            raise DeviceStatusError(f"IP {ip!r} is not in CIDR notation") from None
        if "/" not in ip:
            raise DeviceStatusError(f"IP {ip!r} is not in CIDR notation (add /prefix)")
    if len(set(network.ips)) != len(network.ips):
        raise DeviceStatusError("IPs repeat")
    data: dict[str, Any] = {}
    if network.interface_name:
        data["interfaceName"] = network.interface_name
    if network.ips:
        data["ips"] = list(network.ips)
    if network.hardware_address:
        data["hardwareAddress"] = network.hardware_address
    return data


def _entry(
    driver: str, device: DeviceRecord, status: DeviceStatus | None, generation: int, now: str
) -> dict[str, Any]:
    entry: dict[str, Any] = {"driver": driver, "pool": device.pool, "device": device.device}
    if device.share_id:
        entry["shareID"] = device.share_id
    entry["conditions"] = _conditions(status, generation, now)
    if status is None:
        return entry
    if status.data is not None:
        size = len(json.dumps(status.data, separators=(",", ":")).encode())
        if size > MAX_DATA_BYTES:
            raise DeviceStatusError(f"data of {size} bytes: at most {MAX_DATA_BYTES}")
        entry["data"] = dict(status.data)
    network = network_data_json(status.network)
    if network:
        entry["networkData"] = network
    return entry


def entries(
    driver: str,
    devices: Sequence[DeviceRecord],
    results: Sequence[PreparedDevice],
    *,
    claim: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The ``status.devices`` entries of a prepared claim's devices (``results`` line up
    with ``devices``); raises ``DeviceStatusError`` naming the device whose status the
    server would refuse."""
    generation = int(((claim or {}).get("metadata") or {}).get("generation") or 0)
    now = _now()
    out = []
    for device, result in zip(devices, results, strict=True):
        try:
            out.append(_entry(driver, device, result.status, generation, now))
        except DeviceStatusError as error:
            raise DeviceStatusError(f"device {device.device}: {error}") from None
    return out
