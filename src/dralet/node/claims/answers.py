"""What each claim is answered: the error taxonomy acted on, and the one rule for
retrying a temporary failure (``retry_in``), for claims of a group and claims alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dralet import errors, logs
from dralet.checkpoint.model import ClaimRecord
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimRef
from dralet.node.claims.observe import ClaimView
from dralet.node.claims.schedule import Call, PrepareOutcome

__all__ = [
    "answer_alone",
    "answer_grouped",
    "failure",
    "outcome_of",
    "prepared",
    "retry_grouped",
    "retry_in",
]

log = logging.getLogger("dralet.node.claims")

_A = TypeVar("_A")


def outcome_of(_: ClaimRef, result: ClaimRecord | BaseException | None) -> PrepareOutcome:
    """A grouped claim's answer: the devices it was prepared with (nothing for an
    unprepare), or its error raised."""
    if isinstance(result, BaseException):
        raise result
    return PrepareOutcome(devices=result.devices if result is not None else ())


def failure(operation: str, ref: ClaimRef, exc: Exception) -> PrepareOutcome:
    """A claim's answer for the error its work failed with (never Irreversible)."""
    if isinstance(exc, errors.TemporaryError):
        return PrepareOutcome(error=f"{operation} failed temporarily: {exc}; retry")
    if isinstance(exc, errors.DraletError):
        message = str(exc)
        if not message.startswith(operation):  # say what failed once, never twice
            message = f"{operation} failed: {message}"
        log.warning("%s", message, extra={"claim_uid": ref.uid})
        return PrepareOutcome(error=str(exc))
    log.error(
        "%s failed unexpectedly",
        operation,
        exc_info=(type(exc), exc, exc.__traceback__),
        extra={"claim_uid": ref.uid},
    )
    return PrepareOutcome(error=f"{operation} failed: {type(exc).__name__}: {exc}")


def prepared(ref: ClaimRef, view: ClaimView) -> PrepareOutcome:
    """A claim prepared already: its devices, if the kubelet names it as recorded."""
    record = view.record
    assert record is not None
    if (record.namespace, record.name) != (ref.namespace, ref.name):
        raise errors.ClaimError(
            ref.uid,
            f"claim UID {ref.uid} is prepared as {record.namespace}/{record.name}, "
            f"not {ref.namespace}/{ref.name}",
        )
    return PrepareOutcome(devices=record.devices)


def retry_in(exc: Exception, deadline: float) -> float | None:
    """The seconds after which a prepare that failed with ``exc`` is tried again, or
    None: not a ``TemporaryError``, or its delay would pass the call's ``deadline``
    (monotonic seconds; it is then answered as retryable)."""
    if not isinstance(exc, errors.TemporaryError) or time.monotonic() + exc.delay >= deadline:
        return None
    log.info("prepare failed temporarily (%s); retrying in %g s", exc, exc.delay)
    return exc.delay


def retry_grouped(call: Call, ref: ClaimRef, result: object) -> float | None:
    """A grouped prepare's temporary failure: after how long it goes on alone."""
    if call.operation != "prepare" or not isinstance(result, Exception):
        return None
    with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
        return retry_in(result, call.deadline)


def answer_grouped(
    metrics: DriverMetrics,
    call: Call,
    ref: ClaimRef,
    started: float,
    answer: Callable[[ClaimRef, _A], PrepareOutcome],
    given: _A,
) -> None:
    """Record a group's claim's answer (the error taxonomy acted on) and its metric."""
    try:
        outcome = answer(ref, given)
    except Exception as exc:  # noqa: BLE001 - the claim's answer
        with logs.bind(claim_uid=ref.uid, claim=f"{ref.namespace}/{ref.name}"):
            outcome = failure(call.operation, ref, exc)
    call.answered(ref.uid, outcome)
    result = "error" if outcome.error else "success"
    metrics.operation_done(call.operation, result, time.perf_counter() - started)


async def answer_alone(
    metrics: DriverMetrics,
    operation: str,
    ref: ClaimRef,
    deadline: float,
    one: Callable[[ClaimRef, float], Awaitable[PrepareOutcome]],
) -> PrepareOutcome:
    """The error taxonomy, acted on: temporary → retryable answer, claim/permanent →
    that claim's error, irreversible → up to the RPC (Internal), anything else → a
    per-claim error naming its type (a bug, logged with its traceback)."""
    started = time.perf_counter()
    result = "error"
    try:
        outcome = await one(ref, deadline)
        result = "success" if not outcome.error else "error"
        return outcome
    except errors.GOES_UP:
        raise
    except Exception as exc:  # noqa: BLE001 - the claim's answer
        return failure(operation, ref, exc)
    finally:
        metrics.operation_done(operation, result, time.perf_counter() - started)
