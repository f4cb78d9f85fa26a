"""What ``dralet audit`` finds on a test's node, for a test to end with::

    assert await testing.audit_findings(settings, backend, claims=claims) == []

The audit reads the node's claim records, its CDI directory, the backend's view of its
devices and the claims, without changing any of them, and names every place where they
disagree (a spec left behind, a device still held for a released claim, a finalizer a
claim keeps): what a node is not left with once every call is answered and the work it
owes is done.
"""

from __future__ import annotations

from dralet.node import audit
from dralet.node.backend import ClaimBackend
from dralet.node.settings import DriverSettings

__all__ = ["audit_findings"]


async def audit_findings(
    settings: DriverSettings,
    backend: ClaimBackend | None = None,
    *,
    claims: audit.ClaimLister | None = None,
) -> list[audit.Finding]:
    """Every inconsistency ``dralet audit`` reports for the node ``settings`` names ([]
    when there is none), with ``backend`` asked what it holds and ``claims`` (a
    ``MemoryClaims``, say) listed; either left out is not checked. The backend is first
    told which devices the records hold (``restore_held``), as at a driver's start."""
    snapshot = await audit.take_snapshot(settings, backend=backend, claims=claims)
    return audit.find_inconsistencies(snapshot)
