"""The claim engine: one explicit state machine for every claim on a node.

``states`` (the lifecycle as data) · ``observe`` (read what is true, change nothing) ·
``plan`` (pure: goal + observation → steps; also what ``dralet audit`` reports) ·
``execute`` (the steps, under the claim lock, with failpoints and durable records) ·
``store`` (the records, over ``dralet.checkpoint``) · ``engine`` (the RPC paths) ·
``settle`` (recovery at start, stale-claim cleanup, ``audit --fix``) · ``source``
(the ResourceClaim port and its pure checks) · ``calls`` · ``fairness``.
"""

from dralet.node.claims.engine import ClaimEngine, Mode, PrepareOutcome
from dralet.node.claims.settle import RecoveryReport
from dralet.node.claims.source import (
    ClaimSource,
    EventSink,
    Staleness,
    finalizer_name,
    select_allocation,
    staleness,
)

__all__ = [
    "ClaimEngine",
    "ClaimSource",
    "EventSink",
    "Mode",
    "PrepareOutcome",
    "RecoveryReport",
    "Staleness",
    "finalizer_name",
    "select_allocation",
    "staleness",
]
