"""Whether the device taint eviction controller evicts the pods of an allocated claim.

Owns the rule of k8s.io/kubernetes pkg/controller/devicetainteviction
device_taint_eviction.go (claimEvictionTime, v1.37.2 and v1.38.0-beta.0): a ``NoExecute``
taint on an allocated device (the slice's own or a DeviceTaintRule's) evicts the pods
that use the claim unless a toleration recorded in the allocation result tolerates it
(``tolerationSeconds`` only delays the eviction). Which tolerations count changed in
1.38 (kubernetes/kubernetes#143376): 1.37 counts only those with effect ``NoExecute``,
1.38 also those with an empty effect, as the API documents (an empty effect matches every
effect).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dralet.allocation import model

__all__ = ["EvictionSettings", "eviction"]

NO_EXECUTE = "NoExecute"


@dataclass(frozen=True)
class EvictionSettings:
    """How the simulated eviction controller reads tolerations."""

    empty_effect_tolerates_no_execute: bool = False
    """A toleration without an effect protects against NoExecute taints (1.38 on)."""


def _counts(toleration: model.DeviceToleration, settings: EvictionSettings) -> bool:
    if toleration.effect == NO_EXECUTE:
        return True
    return toleration.effect == "" and settings.empty_effect_tolerates_no_execute


def eviction(
    allocation: model.AllocationResult,
    devices: Mapping[model.DeviceId, model.Device],
    *,
    settings: EvictionSettings,
) -> str | None:
    """Why the claim's pods are evicted (or will be, after a toleration's seconds); None
    when no allocated device has a NoExecute taint its result does not tolerate for ever."""
    for result in allocation.results:
        device = devices.get(result.device_id)
        if device is None:
            continue
        for taint in device.taints:
            if taint.effect != NO_EXECUTE:
                continue
            counted = [t for t in result.tolerations if _counts(t, settings) and t.tolerates(taint)]
            seconds = [t.raw.get("tolerationSeconds") for t in counted]
            if counted and any(s is None for s in seconds):
                continue
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            source = f" (DeviceTaintRule {taint.rule})" if taint.rule else ""
            after = ""
            if counted:
                after = f" after {max(0, min(int(s) for s in seconds if s is not None))}s"
            return (
                f"its pods are evicted{after}: device {result.device_id} is tainted "
                f"{shown}:{NO_EXECUTE}{source}, not tolerated by request {result.request!r}"
            )
    return None
