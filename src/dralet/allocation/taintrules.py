"""DeviceTaintRules applied to the devices they select, as the scheduler sees them.

The scheduler's allocator treats a rule's taint like one the driver published on the
device (k8s.io/dynamic-resource-allocation structured allocator, DRADeviceTaintRules GA
and on in 1.37): the taint is added to every device a rule's selector matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dralet.allocation import model

__all__ = ["apply"]


def apply(
    slices: Sequence[model.ResourceSlice], rules: Sequence[model.DeviceTaintRule]
) -> tuple[model.ResourceSlice, ...]:
    """``slices`` with each device's taints extended by the rules that select it."""
    if not rules:
        return tuple(slices)
    out = []
    for slice_ in slices:
        devices = []
        for device in slice_.devices:
            added = tuple(
                rule.taint
                for rule in rules
                if rule.matches(slice_.driver, slice_.pool, device.name)
            )
            devices.append(
                dataclasses.replace(device, taints=device.taints + added) if added else device
            )
        out.append(dataclasses.replace(slice_, devices=tuple(devices)))
    return tuple(out)
