"""The named cases of cluster mode: id, level, what each checks and what it needs.

Levels mean what they mean in the local kit (``dralet.conformance.cases``): MUST cases
are what a pod using the driver depends on; SHOULD cases are guardrails whose failure
leaks or hides something without breaking a pod. ``node`` cases run once per selected
node; none is driver-wide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dralet.conformance.cases import Level

__all__ = ["CASES", "CASE_NAMES", "ClusterCase", "case", "with_prerequisites"]


@dataclass(frozen=True)
class ClusterCase:
    name: str
    level: Level
    rule: str
    needs: str = ""
    """What the case needs beyond the common flags ('' = nothing)."""
    after: tuple[str, ...] = ("slices.published",)
    """The cases whose outcome this one builds on: run first whenever it is chosen."""


CASES: tuple[ClusterCase, ...] = (
    ClusterCase(
        "slices.published",
        "MUST",
        "the driver published ResourceSlices with devices for the node",
        after=(),
    ),
    ClusterCase(
        "slices.pools-complete",
        "MUST",
        "every pool of the node has resourceSliceCount slices at its newest generation",
    ),
    ClusterCase(
        "slices.generations",
        "SHOULD",
        "no slice of an older pool generation is left once the pool is complete",
    ),
    ClusterCase(
        "slices.valid",
        "MUST",
        "every slice of the node passes the server release's rules (dralet validate)",
    ),
    ClusterCase(
        "claim.allocated",
        "MUST",
        "a claim from a ResourceClaimTemplate is allocated a device of the driver on the node",
    ),
    ClusterCase(
        "pod.running",
        "MUST",
        "the pod using the claim runs on the node (the kubelet prepared the claim)",
        after=("claim.allocated",),
    ),
    ClusterCase(
        "pod.sees-devices",
        "SHOULD",
        "the pod's containers see environment variables or /dev entries a pod without "
        "the claim does not (the CDI edits reached them)",
        after=("pod.running",),
    ),
    ClusterCase(
        "exclusive.distinct",
        "MUST",
        "two claims at once get different devices, and their pods different device edits",
        "two devices on the node",
        after=("pod.running",),
    ),
    ClusterCase(
        "claim.released",
        "MUST",
        "the pod deleted: it goes (the kubelet unprepared), the claim is deallocated and "
        "deleted, no finalizer is left",
        after=("pod.running",),
    ),
    ClusterCase(
        "claim.reuse",
        "MUST",
        "the released device is allocated to a new claim, whose pod runs and sees the "
        "same device edits",
        "a device attribute whose value no other device of the node has",
        after=("claim.released",),
    ),
    ClusterCase(
        "shared.two-pods",
        "MUST",
        "one claim used by two pods: both run, the claim is reserved for both, and it is "
        "released once both are gone",
    ),
    ClusterCase(
        "driver.pod-deleted",
        "MUST",
        "the driver's pod deleted while a claim is prepared: the workload keeps running, "
        "and is released once the driver is back",
        "--driver-namespace and --driver-selector",
    ),
    ClusterCase(
        "driver.restart-before-unprepare",
        "MUST",
        "the driver's pod deleted, then the workload deleted while the driver is away: the "
        "claim is released once the driver is back",
        "--driver-namespace and --driver-selector",
    ),
    ClusterCase(
        "bad-image.released",
        "MUST",
        "a pod whose image cannot be pulled: its claim is still released when it is deleted",
    ),
    ClusterCase(
        "deadline",
        "MUST",
        "every start (claim allocated to pod running) and release (pod deleted to claim "
        "released) ends within the kubelet's 45 s deadline for one driver call",
        after=(),
    ),
)
CASE_NAMES = tuple(c.name for c in CASES)
_BY_NAME = {c.name: c for c in CASES}


def case(name: str) -> ClusterCase:
    return _BY_NAME[name]


def with_prerequisites(names: Iterable[str]) -> frozenset[str]:
    """The cases to run for ``names``: each and, transitively, the cases it builds on.

    Raises KeyError naming the first unknown case."""
    chosen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in chosen:
            chosen.add(name)
            todo.extend(_BY_NAME[name].after)
    return frozenset(chosen)
