"""Waiting, in tests of a driver process, for the finalizer removals an unprepare owes:
the driver answers the kubelet first and removes the finalizer after the answer."""

from __future__ import annotations

import asyncio
import time

from dralet.cluster import ControlPlane
from dralet.kubelet import KubeletClaim

OWED_WITHIN = 30.0
"""How long a driver may take to remove a finalizer it owes, in a test."""
POLL = 0.02


async def settled_finalizers(plane: ControlPlane, ref: KubeletClaim) -> list[str]:
    """The claim's finalizers once none is left or ``OWED_WITHIN`` s have passed."""
    deadline = time.monotonic() + OWED_WITHIN
    while (found := plane.finalizers(ref)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL)
    return found
