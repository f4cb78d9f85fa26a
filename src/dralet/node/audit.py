"""Node audit: every inconsistency between the records, the CDI directory, the backend's
view of its devices and (when reachable) the ResourceClaims in the API.

An audit finding is a step the claim engine's planner (``dralet.node.claims.plan``)
planned and did not execute: ``take_snapshot`` observes, ``find_inconsistencies`` plans
(pure), and ``repair`` executes the planned steps through the engine, under the same
claim locks and through the same code as recovery at start and stale-claim cleanup.
Used by ``dralet audit`` and by the crash suite's invariant checks. A finding with an
empty ``repair`` needs a person.
"""

from __future__ import annotations

from collections.abc import Sequence

from dralet.node.claims.engine import ClaimEngine
from dralet.node.claims.findings import ClaimLister, Finding, NodeSnapshot, plan_node, take_snapshot
from dralet.node.claims.nodewide import RecoveryReport

__all__ = [
    "ClaimLister",
    "Finding",
    "NodeSnapshot",
    "accept_lost_store",
    "find_inconsistencies",
    "repair",
    "take_snapshot",
]


def find_inconsistencies(snapshot: NodeSnapshot) -> list[Finding]:
    """Every inconsistency in ``snapshot``, each with its planned step, in a stable order."""
    return plan_node(snapshot)


async def repair(engine: ClaimEngine, findings: Sequence[Finding]) -> RecoveryReport:
    """Execute the planned step of every finding through the engine."""
    return await engine.fix(findings)


async def accept_lost_store(engine: ClaimEngine) -> RecoveryReport:
    """``--fix --accept-lost-store``: start a new store in place of a lost one, then
    recover (``nodewide.accept_lost_store``)."""
    return await engine.accept_lost_store()
