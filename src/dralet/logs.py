"""Structured logging: JSON or key=value lines carrying the call's context.

``bind(claim_uid=..., request_id=...)`` stores context in a contextvar; every record
logged inside that context (including from libraries using stdlib logging) carries it.
``configure(fmt="json"|"text")`` is called once by the CLI.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["bind", "configure", "context"]

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "dralet_log_context", default=None
)

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def context() -> dict[str, Any]:
    """The fields bound for the current call."""
    return dict(_context.get() or {})


@contextlib.contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add fields to every log line emitted inside the block."""
    token = _context.set({**context(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = context()
    fields.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED})
    return fields


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the bound fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, sort_keys=False)


class KeyValueFormatter(logging.Formatter):
    """``ts level logger msg key=value ...`` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{ts} {record.levelname.lower():7} {record.name} {record.getMessage()}"
        if extra:
            line = f"{line} {extra}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure(*, fmt: str = "text", level: str = "info") -> None:
    """Route the root logger to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
