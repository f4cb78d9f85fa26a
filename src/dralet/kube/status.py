"""Errors the API server answers with, as one exception type carrying its ``Status``.

The server explains every failure with a ``kind: Status`` body (``reason`` such as
``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``, ``Gone``); ``ApiError`` keeps
that reason, the HTTP code and any ``Retry-After`` so callers decide on data, not text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dralet import errors

__all__ = ["ApiError", "error_from_response", "parse_retry_after"]

NOT_FOUND = 404
CONFLICT = 409
GONE = 410
UNPROCESSABLE = 422
TOO_MANY_REQUESTS = 429


class ApiError(errors.DraletError):
    """The API server refused or failed a request."""

    def __init__(
        self,
        code: int,
        *,
        reason: str,
        message: str,
        status: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.status = dict(status or {})
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.code == NOT_FOUND

    @property
    def conflict(self) -> bool:
        """A stale resourceVersion or failed precondition (not AlreadyExists)."""
        return self.code == CONFLICT and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.code == CONFLICT and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """The resourceVersion asked for is too old (compacted away): relist."""
        return self.code == GONE

    @property
    def invalid(self) -> bool:
        return self.code == UNPROCESSABLE


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given as delta-seconds; None otherwise."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_response(code: int, data: bytes, *, retry_after: str | None = None) -> ApiError:
    """An ``ApiError`` from a failed response's code and body (a Status when JSON)."""
    status: Mapping[str, Any] = {}
    try:
        decoded = json.loads(data) if data else {}
        if isinstance(decoded, dict):
            status = decoded
    except ValueError:
        pass
    reason = str(status.get("reason") or _reason_for(code))
    message = str(status.get("message") or data[:200].decode("utf-8", "replace"))
    details = status.get("details")
    if retry_after is None and isinstance(details, Mapping) and "retryAfterSeconds" in details:
        retry_after = str(details["retryAfterSeconds"])
    return ApiError(
        code,
        reason=reason,
        message=message,
        status=status,
        retry_after=parse_retry_after(retry_after),
    )


def _reason_for(code: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        NOT_FOUND: "NotFound",
        405: "MethodNotAllowed",
        CONFLICT: "Conflict",
        GONE: "Gone",
        UNPROCESSABLE: "Invalid",
        TOO_MANY_REQUESTS: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, "Unknown")
