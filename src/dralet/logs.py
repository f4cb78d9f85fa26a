"""Structured logging: JSON or key=value lines carrying the call's context.

``bind(claim_uid=..., request_id=...)`` stores context in a contextvar; every record
logged inside that context (including from libraries using stdlib logging) carries it:
handlers with a plain stdlib formatter see ``key=value`` pairs after the message, and
dralet's own formatters put the fields in their own place, so they never appear twice.
``configure(fmt="json"|"text")`` is called once by the CLI.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["bind", "configure", "context", "message"]

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "dralet_log_context", default=None
)

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


class _MessageWithContext:
    """A record's message that renders with the bound fields appended, for plain formatters."""

    __slots__ = ("fields", "original")

    def __init__(self, original: object, fields: dict[str, Any]) -> None:
        self.original = original
        self.fields = fields

    def __str__(self) -> str:
        # getMessage() applies %-formatting to the result: escape the appended part.
        suffix = " ".join(f"{k}={_quoted(v)}" for k, v in self.fields.items())
        return f"{self.original} {suffix.replace('%', '%%')}"


def _quoted(value: object) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=') else text


def _record_with_context(
    previous: Callable[..., logging.LogRecord],
) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        fields = _context.get()
        if fields:
            record.msg = _MessageWithContext(record.msg, dict(fields))
        return record

    return factory


logging.setLogRecordFactory(_record_with_context(logging.getLogRecordFactory()))


def message(record: logging.LogRecord) -> str:
    """The record's own message, without the appended context fields."""
    msg = record.msg.original if isinstance(record.msg, _MessageWithContext) else record.msg
    text = str(msg)
    return text % record.args if record.args else text


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
            "msg": message(record),
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
        line = f"{ts} {record.levelname.lower():7} {record.name} {message(record)}"
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
