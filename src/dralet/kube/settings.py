"""Tunables of the API client: timeouts, retry backoffs, watch and conflict handling."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KubeSettings"]


@dataclass(frozen=True)
class KubeSettings:
    """How ``dralet.kube`` talks to the API server. Every time is in seconds."""

    request_timeout: float = 30.0
    """Longest one non-watch request may take, connect to last byte."""
    retry_backoff: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
    """Wait before each retry of a request that failed in a retryable way; its length is
    the number of retries."""
    retry_after_cap: float = 30.0
    """Longest server ``Retry-After`` that is honoured; longer ones are cut to this."""
    retryable_codes: frozenset[int] = frozenset({429, 500, 502, 503, 504})
    """HTTP codes that mean "try again later" rather than "no"."""
    conflict_backoff: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)
    """Wait before each re-read and retry after a 409 Conflict; its length is the number
    of retries before giving up with a TemporaryError."""
    watch_timeout: int = 290
    """``timeoutSeconds`` asked of the server for one watch request (then it resumes)."""
    watch_read_margin: float = 30.0
    """Extra seconds a watch read may wait beyond ``watch_timeout`` before the client
    treats the connection as dead."""
    watch_backoff: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 5.0)
    """Waits between watch reconnections after a failure; the last repeats forever."""
    field_manager: str = "dralet"
    """Field manager recorded for server-side apply and for writes."""
