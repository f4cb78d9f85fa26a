"""The named conformance cases: id, level and the rule each one enforces.

MUST cases are the kubelet's contract: a driver that breaks one makes a kubelet (or the
container runtime it feeds) misbehave. SHOULD cases are dralet's guardrails: breaking
one leaks or risks something without the kubelet noticing. Cases scoped ``kubelet`` run
once per kubelet version targeted; ``driver`` cases run once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CASES", "CASE_NAMES", "Case", "Level", "case"]

Level = Literal["MUST", "SHOULD"]
Scope = Literal["driver", "kubelet"]


@dataclass(frozen=True)
class Case:
    name: str
    level: Level
    scope: Scope
    rule: str


CASES: tuple[Case, ...] = (
    Case(
        "registration.order",
        "MUST",
        "driver",
        "the DRA endpoint listens when GetInfo first answers",
    ),
    Case("registration.type", "MUST", "driver", 'GetInfo type is "DRAPlugin"'),
    Case("registration.name", "MUST", "driver", "GetInfo name is the driver name"),
    Case(
        "registration.endpoint",
        "MUST",
        "driver",
        "GetInfo endpoint is an absolute path to the DRA socket",
    ),
    Case(
        "registration.versions",
        "MUST",
        "driver",
        "some kubelet DRA service is advertised, v1 before v1beta1",
    ),
    Case(
        "kubelet.service",
        "MUST",
        "kubelet",
        "the service this kubelet picks answers (health too, if advertised)",
    ),
    Case(
        "kubelet.health-watch",
        "SHOULD",
        "kubelet",
        "this kubelet's health watch logs no error and is not stopped: reports where "
        "health is advertised, a quiet stream where a 1.36 kubelet watches anyway",
    ),
    Case(
        "invalid-argument.empty-uid",
        "SHOULD",
        "kubelet",
        "a claim with an empty UID is InvalidArgument",
    ),
    Case(
        "unprepare.unknown-claim",
        "MUST",
        "kubelet",
        "unprepare of a claim never prepared is OK, with an entry",
    ),
    Case(
        "prepare.one-entry-per-claim",
        "MUST",
        "kubelet",
        "one response entry per requested claim, no other",
    ),
    Case(
        "prepare.twice", "MUST", "kubelet", "preparing a claim again returns the same CDI devices"
    ),
    Case(
        "prepare.per-claim-error",
        "SHOULD",
        "kubelet",
        "one bad claim gets its own error; the call and others succeed",
    ),
    Case(
        "prepare.devices-match-allocation",
        "MUST",
        "kubelet",
        "returned devices are the allocation's: pool, device, request names, shareID",
    ),
    Case(
        "cdi.qualified-ids",
        "MUST",
        "kubelet",
        "CDI device ids are fully qualified (vendor/class=name)",
    ),
    Case(
        "cdi.resolvable",
        "MUST",
        "kubelet",
        "each CDI id is defined by a valid spec file in the CDI directory",
    ),
    Case(
        "cdi.spec-valid",
        "MUST",
        "kubelet",
        "every spec of the driver's kinds is valid for the cdiVersion it declares",
    ),
    Case(
        "cdi.unique-ids",
        "MUST",
        "kubelet",
        "claims never share a CDI id; none resolves after its claim is unprepared",
    ),
    Case(
        "cdi.atomic-write",
        "SHOULD",
        "kubelet",
        "spec files appear by rename, never written in place (inotify)",
    ),
    Case(
        "cdi.spec-removed",
        "SHOULD",
        "kubelet",
        "after unprepare no spec file defines the claim's CDI devices",
    ),
    Case("unprepare.twice", "MUST", "kubelet", "unpreparing a claim twice is OK both times"),
    Case(
        "restart.state-kept",
        "MUST",
        "kubelet",
        "after a restart, prepare again gives the same ids, spec present",
    ),
    Case(
        "restart.unprepare-idempotent",
        "MUST",
        "kubelet",
        "unprepare, restart, unprepare again: OK, spec gone",
    ),
    Case(
        "deadline",
        "MUST",
        "kubelet",
        "every call is answered well within the kubelet's 45 s deadline",
    ),
)
CASE_NAMES = tuple(c.name for c in CASES)
_BY_NAME = {c.name: c for c in CASES}


def case(name: str) -> Case:
    return _BY_NAME[name]
