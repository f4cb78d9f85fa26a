"""One error taxonomy for dralet, used by every layer and acted on by the claim engine.

Catch order, written out once (``dralet.node.claims.engine.answer_alone``):
what ``goes_up`` (``asyncio.CancelledError``, ``IrreversibleError``) is always re-raised
first, at every place that keeps a claim's failure to itself; ``IrreversibleError`` goes
up to the RPC, which fails with gRPC Internal (the only path there); ``TemporaryError`` is
retried after its ``delay`` while the call's budget allows, then answered as that
claim's retryable error; ``ClaimError`` and ``PermanentError`` are that claim's answer,
the other claims go on; anything else is a bug, logged with its traceback and answered
as a per-claim error with its type name, never swallowed. ``InvalidRequestError`` is
raised at the gRPC edge before the engine runs: the whole RPC fails with
InvalidArgument and nothing changes.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GOES_UP",
    "CheckpointCorruptError",
    "ClaimError",
    "DeviceBusyError",
    "DraletError",
    "InvalidRequestError",
    "IrreversibleError",
    "PermanentError",
    "TemporaryError",
    "goes_up",
]


class DraletError(Exception):
    """Root of every error dralet raises on purpose."""


class PermanentError(DraletError):
    """Retrying the same operation cannot succeed without a change elsewhere.

    A backend raises it (or a subclass) from ``prepare`` for a device it will never be
    able to prepare as allocated: the claim is rolled back and answered, not retried.
    """


class TemporaryError(DraletError):
    """The operation may succeed when retried after ``delay`` seconds.

    Raised by a backend (a device still resetting, a busy firmware): the engine rolls the
    claim back and prepares it again after ``delay`` while the call's budget allows.
    """

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class InvalidRequestError(DraletError):
    """A request is malformed; it is refused as a whole and nothing is written."""


class ClaimError(DraletError):
    """Preparing or unpreparing one claim failed; reported in that claim's entry."""

    def __init__(self, claim_uid: str, message: str) -> None:
        super().__init__(message)
        self.claim_uid = claim_uid


class DeviceBusyError(ClaimError):
    """A device is still recorded for another claim on this node."""

    def __init__(self, claim_uid: str, *, device: str, holder_uid: str) -> None:
        super().__init__(
            claim_uid,
            f"device {device} is still prepared for claim {holder_uid}; "
            "it will be usable once that claim is unprepared",
        )
        self.device = device
        self.holder_uid = holder_uid


class IrreversibleError(DraletError):
    """A device can be neither finished nor undone; a human must look.

    Raised by a backend's ``release`` (or ``prepare``) when the hardware is left in a
    state it cannot get out of. The engine keeps the claim's record as it is (nothing is
    forgotten) and the RPC fails with gRPC Internal naming the failure.
    """


class CheckpointCorruptError(PermanentError):
    """The checkpoint file exists but cannot be trusted (checksum, syntax, version)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"checkpoint {path} is unusable: {reason}")
        self.path = path
        self.reason = reason


GOES_UP: tuple[type[BaseException], ...]
"""Never kept as one claim's failure: ``except errors.GOES_UP: raise`` comes before
every per-claim ``except Exception``. Made on first use (``__getattr__``): it names
``asyncio.CancelledError``, and the code that only validates manifests or allocates
does not load asyncio for it (its objects would slow every collection there)."""


def __getattr__(name: str) -> Any:
    if name == "GOES_UP":
        import asyncio  # loaded by the code that catches it, not before

        globals()["GOES_UP"] = goes = (asyncio.CancelledError, IrreversibleError)
        return goes
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def goes_up(exc: BaseException) -> bool:
    """Whether ``exc``, handed over as a value (a result of a group's step), must be
    raised instead of answered per claim: an irreversible failure, or anything that
    is not an ``Exception`` (cancelled, the process dying at a failpoint)."""
    return isinstance(exc, IrreversibleError) or not isinstance(exc, Exception)
