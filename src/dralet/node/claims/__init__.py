"""The claim engine: one explicit state machine for every claim on a node.

Read top down, each module importing only those below it (an import contract checks
it): ``engine`` (the RPC paths: prepare and unprepare calls, each claim's answer and the
one retry rule) · ``nodewide`` (recovery at start, stale-claim cleanup, ``audit --fix``)
· ``parts`` (what both work on) · ``prepare`` / ``teardown`` / ``repairs`` (the routes:
each durable step under the claim lock) · ``group`` (a call's claims in groups on fairly
shared slots, and how a group goes through a step) · ``findings`` (the whole node
observed and planned: what ``dralet audit`` reports) · ``plan`` (one claim observed
under its lock, and its steps planned: pure) · ``calls`` (every call out of the process:
the ResourceClaim port and the backend) · ``store`` (the records, over
``dralet.checkpoint``, and the claim's CDI spec) · ``devicemetadata`` (the device
metadata files) · ``records`` (a claim's allocation checked, its devices as recorded,
and the lifecycle table: failpoints, allowed record states).
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
