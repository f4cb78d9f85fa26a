"""The DRA feature gates dralet's rules depend on, per release: the one table the
simulated scheduler (``allocation.features``), the publisher (``kube.features``) and
``dralet validate`` (``validation.targets``) read.

Source: k8s.io/kubernetes v1.38.0-beta.0 pkg/features/kube_features.go, the versioned
specs of each gate (the 1.37 entries agree with v1.37.2). A gate is off by default before
``on_from`` (alpha, or DRADeviceTaintRules' off-by-default beta in 1.36); from
``locked_from`` it is GA with LockToDefault, and a component refuses to start with it
set against its default.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DRA_GATES", "Gate", "gate"]


@dataclass(frozen=True)
class Gate:
    name: str
    alpha_from: int
    """The minor release that first has the gate (and so its API fields)."""
    on_from: int | None = None
    """The minor release from which it is on by default; None: off in every release."""
    locked_from: int | None = None
    """The minor release from which it is locked to its default."""

    def on_by_default(self, minor: int) -> bool:
        return self.on_from is not None and minor >= self.on_from

    def locked(self, minor: int) -> bool:
        return self.locked_from is not None and minor >= self.locked_from


DRA_GATES: tuple[Gate, ...] = (
    Gate("DRAPartitionableDevices", alpha_from=33, on_from=36, locked_from=38),
    Gate("DRADeviceTaints", alpha_from=33, on_from=36, locked_from=38),
    # GA in 1.38 but not locked (LockToDefault from 1.39).
    Gate("DRAConsumableCapacity", alpha_from=34, on_from=36),
    Gate("DRADeviceBindingConditions", alpha_from=34, on_from=36, locked_from=38),
    Gate("DRADeviceTaintRules", alpha_from=35, on_from=37, locked_from=38),
    Gate("DRAListTypeAttributes", alpha_from=36),
)

_BY_NAME = {g.name: g for g in DRA_GATES}


def gate(name: str) -> Gate:
    """The gate called ``name`` (an upstream gate name); KeyError if dralet has no rule for it."""
    return _BY_NAME[name]
