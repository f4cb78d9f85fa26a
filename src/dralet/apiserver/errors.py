"""A request the stand-in refuses, answered as a ``kind: Status`` body."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ApiStatusError", "JSONObject"]

JSONObject = dict[str, Any]


class ApiStatusError(Exception):
    """A request the stand-in refuses; becomes a ``kind: Status`` answer."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def status(self) -> JSONObject:
        body: JSONObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body
