"""The claim engine: one explicit state machine for every claim on a node.

Read top down, each module importing only those below it (an import contract checks
it): ``engine`` (the RPC paths: prepare and unprepare calls) · ``nodewide`` (recovery
at start, stale-claim cleanup, ``audit --fix``) · ``parts`` (what both work on) ·
``prepare`` / ``teardown`` / ``repairs`` (the routes: each durable step under the claim
lock) · ``answers`` (each claim's answer, the one retry rule) · ``group`` (how a group
of claims goes through a step) · ``plan`` (pure: goal + observation → steps; also what
``dralet audit`` reports) · ``calls`` (every call out of the process) · ``schedule``
(calls on fairly shared slots) · ``specio`` (a claim's CDI spec, built and written) ·
``observe`` (read what is true, change nothing) · ``records`` (a claim's devices as
recorded) · ``states`` (the lifecycle table: failpoints, allowed record states) ·
``store`` (the records, over ``dralet.checkpoint``) · ``source`` (the ResourceClaim
port and its pure checks).
"""

from dralet.node.claims.calls import ClaimSource, EventSink, finalizer_name
from dralet.node.claims.engine import ClaimEngine, Mode, PrepareOutcome
from dralet.node.claims.nodewide import RecoveryReport
from dralet.node.claims.records import Staleness, select_allocation, staleness

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
