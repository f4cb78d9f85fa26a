"""The pool as it is published: a backend's devices and counter sets as ResourceSlice JSON.

Pure: ``build_pool`` turns what the backend lists into the canonical (v1-shaped) content
of the pool's slices, leaving out what the API server would refuse and what the cluster
does not serve; ``dralet.kube.slices.plan_pool`` then diffs it against the live slices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dralet.kube import features, slices
from dralet.node import devices
from dralet.node.devices import Device, counter_set_to_json, device_to_json, taint_to_json

__all__ = ["BuiltPool", "build_pool", "own_domain_problems"]


@dataclass(frozen=True)
class BuiltPool:
    """The slices to publish, and what was left out because the API server would refuse it
    or the cluster does not serve it."""

    chunks: tuple[tuple[dict[str, Any], ...], ...]
    """Canonical JSON devices cut into slices; an empty pool is one empty slice."""
    counter_chunks: tuple[tuple[dict[str, Any], ...], ...] = ()
    """Shared counter sets, at most 8 per slice, each slice holding no devices."""
    skipped: tuple[str, ...] = ()
    """One line per device or counter set left out, naming it and every problem it has."""
    unserved: frozenset[str] = frozenset()
    """Feature gates of fields the backend asked for that the cluster does not serve."""


def build_pool(
    backend_devices: Sequence[Device],
    *,
    driver: str,
    pool: str,
    node_name: str,
    counter_sets: Sequence[devices.CounterSet] = (),
    served: frozenset[str] | None = None,
    extra_taints: Mapping[str, devices.DeviceTaint] | None = None,
) -> BuiltPool:
    """The pool's devices and counter sets in canonical JSON, cut into slices.

    Fields of features the cluster does not serve (``served``, gate names of
    ``dralet.kube.features``; None = all) are left out, and named in ``unserved``; so are
    partitions (``Device.partition``) where partitionable devices are not served. A device
    or counter set the API server would refuse is left out (and named in ``skipped``);
    the rest are still published. A slice holds at most 128 devices, 64 when any of them
    has taints or consumes counters. A device with an attribute or capacity named with the
    driver's own domain is left out too (``own_domain_problems``). ``extra_taints`` adds
    one taint to the devices it names (the health taint). Raises
    ``slices.InvalidDeviceError`` only when nothing can be published: the driver, pool or
    node name would be refused.
    """
    problems = slices.driver_name_problems(driver) + slices.pool_name_problems(pool)
    problems += slices.node_name_problems(node_name)
    if problems:
        raise slices.InvalidDeviceError(problems)
    unserved: set[str] = set()
    skipped: list[str] = []
    counters: list[dict[str, Any]] = []
    counting = served is None or "DRAPartitionableDevices" in served
    if not counting and (counter_sets or any(d.partition for d in backend_devices)):
        unserved.add("DRAPartitionableDevices")
    if not counting:
        backend_devices = [d for d in backend_devices if not d.partition]
    else:
        names: set[str] = set()
        for counter_set in counter_sets:
            as_json = counter_set_to_json(counter_set)
            set_problems = slices.counter_set_problems(counter_set.name, as_json["counters"])
            if _listed(counter_set.name, "counter set", set_problems, names, skipped):
                counters.append(as_json)
    seen: set[str] = set()
    converted = []
    for device in backend_devices:
        as_json = device_to_json(device)
        if extra_taints and device.name in extra_taints:
            as_json["taints"] = [
                *as_json.get("taints", []),
                taint_to_json(extra_taints[device.name]),
            ]
        if served is not None:
            as_json, removed = features.strip_device(as_json, served)
            unserved |= removed
        device_problems = slices.device_problems(as_json)
        device_problems += slices.own_domain_problems(as_json, driver=driver)
        if _listed(device.name, "device", device_problems, seen, skipped):
            converted.append(as_json)
    advanced = any(d.get("taints") or d.get("consumesCounters") for d in converted)
    size = (
        slices.MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS
        if advanced
        else slices.MAX_DEVICES_PER_SLICE
    )
    chunks = [tuple(converted[i : i + size]) for i in range(0, len(converted), size)]
    per_slice = slices.MAX_COUNTER_SETS_PER_SLICE
    counter_chunks = [
        tuple(counters[i : i + per_slice]) for i in range(0, len(counters), per_slice)
    ]
    return BuiltPool(
        chunks=tuple(chunks) or ((),),
        counter_chunks=tuple(counter_chunks),
        skipped=tuple(skipped),
        unserved=frozenset(unserved),
    )


def own_domain_problems(backend_devices: Sequence[Device], *, driver: str) -> list[str]:
    """Every attribute and capacity name of ``backend_devices`` that ``driver`` qualifies
    with its own name, one line each naming the device and the name: the Go helper
    (k8s.io/dynamic-resource-allocation@v0.38.0-beta.0) refuses to publish such a pool."""
    problems: list[str] = []
    for device in backend_devices:
        problems += slices.own_domain_problems(device_to_json(device), driver=driver)
    return problems


def _listed(name: str, what: str, problems: list[str], seen: set[str], skipped: list[str]) -> bool:
    """Whether the entry ``name`` is published: without ``problems`` and not listed
    before; otherwise why not goes to ``skipped``."""
    if name in seen:
        problems.append(f"{what} {name!r} is listed twice")
    if problems:
        skipped.append("; ".join(problems))
        return False
    seen.add(name)
    return True
