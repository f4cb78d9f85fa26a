"""Devices already held by allocated claims, as the scheduler counts them.

Owns the allocated state the allocator starts from: a device allocated whole is held by
one claim; a device that allows multiple allocations is held share by share, each
result with a ``shareID`` adding its ``consumedCapacity`` to what the device has given
out. adminAccess results hold nothing. (Facts: k8s.io/kubernetes v1.37.2 scheduler
dynamicresources claimTracker.GatherAllocatedState: without DRAConsumableCapacity a
shared device counts as allocated whole.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from dralet.allocation import model

__all__ = ["InUse"]


@dataclass
class InUse:
    """Held devices: ``whole`` by holder claim, ``shared`` by capacity consumed so far."""

    whole: dict[model.DeviceId, str] = field(default_factory=dict)
    shared: dict[model.DeviceId, dict[str, Fraction]] = field(default_factory=dict)
    """Device -> capacity name -> sum over its shares (a device with shares that
    consume nothing is here with an empty map)."""

    @classmethod
    def from_claims(cls, claims: Iterable[model.ResourceClaim]) -> InUse:
        state = cls()
        for claim in claims:
            if claim.allocation is not None:
                state.hold(claim.key, claim.allocation.results)
        return state

    def hold(self, claim: str, results: Iterable[model.DeviceRequestAllocationResult]) -> None:
        """Record what a claim's allocation results take."""
        for result in results:
            if result.admin_access:
                continue
            if result.share_id is None:
                self.whole.setdefault(result.device_id, claim)
                continue
            used = self.shared.setdefault(result.device_id, {})
            for name, amount in result.consumed_capacity.items():
                used[name] = used.get(name, Fraction(0)) + amount

    def holder(self, device: model.DeviceId, *, shares_count_whole: bool) -> str | None:
        """The claim holding ``device`` whole (or a description of its shares, when
        shares count as whole allocations), else None."""
        found = self.whole.get(device)
        if found is None and shares_count_whole and device in self.shared:
            return "shares of other claims"
        return found

    def held(self, device: model.DeviceId) -> bool:
        """Held whole or by any share (what uses up a pool's counters)."""
        return device in self.whole or device in self.shared

    def consumed(self, device: model.DeviceId) -> Mapping[str, Fraction]:
        return self.shared.get(device, {})
