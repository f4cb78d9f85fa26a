"""One error taxonomy for dralet, used by every layer.

Catch order, written out once: ``asyncio.CancelledError`` is always re-raised first;
then ``InvalidRequestError`` (bad input: the whole RPC fails with InvalidArgument and
nothing changes); then ``ClaimError`` (one claim failed: its response entry carries the
message, the other claims go on); then ``IrreversibleError`` (state could not be rolled
forward or back: the RPC fails with Internal). Anything else is a bug and is reported as
a per-claim error with its type name, never swallowed silently.
"""

from __future__ import annotations

__all__ = [
    "CheckpointCorruptError",
    "ClaimError",
    "DeviceBusyError",
    "DraletError",
    "InvalidRequestError",
    "IrreversibleError",
    "PermanentError",
    "TemporaryError",
]


class DraletError(Exception):
    """Root of every error dralet raises on purpose."""


class PermanentError(DraletError):
    """Retrying the same operation cannot succeed without a change elsewhere."""


class TemporaryError(DraletError):
    """The operation may succeed when retried after ``delay`` seconds."""

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
    """State could be neither completed nor rolled back; a human must look."""


class CheckpointCorruptError(PermanentError):
    """The checkpoint file exists but cannot be trusted (checksum, syntax, version)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"checkpoint {path} is unusable: {reason}")
        self.path = path
        self.reason = reason
