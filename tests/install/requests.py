"""What the driver pods ask of the API server, read from its audit log: each request once
(by its audit ID; a watch is logged when it starts and when it ends), counted by verb and
resource."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from tests.install.operator import parse_time

__all__ = ["by_verb_and_resource", "driver_requests"]

ACCOUNT_PREFIX = "system:serviceaccount:dralet:"


def driver_requests(
    events: list[dict[str, Any]], start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """The driver ServiceAccount's requests received in [start, end)."""
    seen: dict[str, dict[str, Any]] = {}
    for event in events:
        if not event["user"]["username"].startswith(ACCOUNT_PREFIX):
            continue
        received = parse_time(event["requestReceivedTimestamp"])
        if start <= received < end:
            seen.setdefault(event["auditID"], event)
    return list(seen.values())


def by_verb_and_resource(requests: list[dict[str, Any]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for request in requests:
        ref = request.get("objectRef") or {}
        resource = ref.get("resource", request.get("requestURI", "?").split("?")[0])
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[f"{request['verb']} {resource}"] += 1
    return counts
