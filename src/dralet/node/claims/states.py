"""A claim's lifecycle on a node, as data: the phases and the transitions between them.

The table drives the code: the routes (``prepare``, ``teardown``) hit the failpoints
each transition names after it (declared from here, so the crash suite covers them),
and every record state they write goes through ``moved``, which refuses a change of
state the table does not allow. Recovery and ``dralet audit`` read the phase a crash
left from the record (``phase_of``), and the README's "What dralet does for each claim"
is checked against ``lifecycle_lines`` by a test. Each transition names the durable
fact it leaves behind: the record state it writes, or the file it writes or removes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from dralet import failpoints
from dralet.checkpoint.model import ClaimRecord, ClaimState

__all__ = [
    "FP_AFTER_BACKEND_PREPARE",
    "FP_AFTER_FINALIZER",
    "FP_AFTER_FINALIZER_REMOVED",
    "FP_AFTER_METADATA",
    "FP_AFTER_RELEASE",
    "FP_AFTER_SPEC",
    "FP_AFTER_STARTED",
    "FP_AFTER_UNPREPARE_STARTED",
    "FP_ANSWERED_FINALIZER_OWED",
    "PREPARE",
    "TRANSITIONS",
    "UNPREPARE",
    "Phase",
    "Transition",
    "lifecycle_lines",
    "moved",
    "phase_of",
]

FP_AFTER_STARTED = "claim.prepare.after-started"
FP_AFTER_FINALIZER = "claim.prepare.after-finalizer"
FP_AFTER_BACKEND_PREPARE = "claim.prepare.after-backend"
FP_AFTER_METADATA = "claim.prepare.after-metadata"
FP_AFTER_SPEC = "claim.prepare.after-spec"
FP_AFTER_UNPREPARE_STARTED = "claim.unprepare.after-started"
FP_AFTER_RELEASE = "claim.unprepare.after-release"
FP_ANSWERED_FINALIZER_OWED = "claim.unprepare.answered-finalizer-owed"
FP_AFTER_FINALIZER_REMOVED = "claim.unprepare.after-finalizer"


class Phase(enum.StrEnum):
    NONE = "none"
    PREPARE_STARTED = "PrepareStarted"
    DEVICE_PREPARED = "DevicePrepared"
    SPEC_WRITTEN = "SpecWritten"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"
    SPEC_REMOVED = "SpecRemoved"
    DEVICES_RELEASED = "DevicesReleased"
    RELEASED = "Released"
    GONE = "gone"


@dataclass(frozen=True)
class Transition:
    before: Phase
    after: Phase
    action: str
    """What the engine does, in the README's words."""
    durable: str
    """What is on disk (or in the API) once the transition is done."""
    failpoints: tuple[str, ...] = ()
    """Hit along the transition, each once what it follows is durable (in either order
    for the finalizer and the backend's prepare, which run at the same time: the
    PrepareStarted record already says both may have happened)."""


PREPARE: tuple[Transition, ...] = (
    Transition(
        Phase.NONE,
        Phase.PREPARE_STARTED,
        "PrepareStarted (devices chosen, exclusivity checked)",
        "record PrepareStarted, finalizer marked as possibly added",
        (FP_AFTER_STARTED,),
    ),
    Transition(
        Phase.PREPARE_STARTED,
        Phase.DEVICE_PREPARED,
        "finalizer on the ResourceClaim, while backend.prepare_claim runs (each device's "
        "state kept for the completion write)",
        "finalizer on the API object; the backend holds the devices (a crash from here "
        "on asks it for their states)",
        (FP_AFTER_FINALIZER, FP_AFTER_BACKEND_PREPARE),
    ),
    Transition(
        Phase.DEVICE_PREPARED,
        Phase.SPEC_WRITTEN,
        "CDI spec written atomically",
        "CDI spec file (after the device metadata files it mounts)",
        (FP_AFTER_METADATA, FP_AFTER_SPEC),
    ),
    Transition(
        Phase.SPEC_WRITTEN,
        Phase.PREPARE_COMPLETED,
        "PrepareCompleted",
        "record PrepareCompleted with the spec document and each device's state",
    ),
)

UNPREPARE: tuple[Transition, ...] = (
    Transition(
        Phase.PREPARE_COMPLETED,
        Phase.UNPREPARE_STARTED,
        "UnprepareStarted",
        "record UnprepareStarted",
        (FP_AFTER_UNPREPARE_STARTED,),
    ),
    Transition(
        Phase.UNPREPARE_STARTED,
        Phase.SPEC_REMOVED,
        "CDI spec unlinked",
        "no CDI spec file",
    ),
    Transition(
        Phase.SPEC_REMOVED,
        Phase.DEVICES_RELEASED,
        "backend.release_claim with each device's recorded state",
        "the backend holds no device of the claim",
        (FP_AFTER_RELEASE,),
    ),
    Transition(
        Phase.DEVICES_RELEASED,
        Phase.RELEASED,
        "finalizer removed",
        "record Released while the finalizer removal is retried",
        (FP_ANSWERED_FINALIZER_OWED, FP_AFTER_FINALIZER_REMOVED),
    ),
    Transition(Phase.RELEASED, Phase.GONE, "record removed", "no record"),
)

TRANSITIONS: tuple[Transition, ...] = PREPARE + UNPREPARE
"""Every forward transition; a failed or interrupted prepare rolls back along UNPREPARE
from its phase (PrepareStarted and later go to UnprepareStarted)."""

_RECORDED: dict[ClaimState, Phase] = {
    ClaimState.PREPARE_STARTED: Phase.PREPARE_STARTED,
    ClaimState.PREPARE_COMPLETED: Phase.PREPARE_COMPLETED,
    ClaimState.UNPREPARE_STARTED: Phase.UNPREPARE_STARTED,
    ClaimState.RELEASED: Phase.RELEASED,
}


_RECORDS: dict[Phase, ClaimState | None] = {
    Phase.NONE: None,
    Phase.PREPARE_STARTED: ClaimState.PREPARE_STARTED,
    Phase.DEVICE_PREPARED: ClaimState.PREPARE_STARTED,
    Phase.SPEC_WRITTEN: ClaimState.PREPARE_STARTED,
    Phase.PREPARE_COMPLETED: ClaimState.PREPARE_COMPLETED,
    Phase.UNPREPARE_STARTED: ClaimState.UNPREPARE_STARTED,
    Phase.SPEC_REMOVED: ClaimState.UNPREPARE_STARTED,
    Phase.DEVICES_RELEASED: ClaimState.UNPREPARE_STARTED,
    Phase.RELEASED: ClaimState.RELEASED,
    Phase.GONE: None,
}
"""The record state each phase is recorded as (a phase between two record writes is
told apart by the files and device states, ``phase_of``)."""


def _record_moves() -> frozenset[tuple[ClaimState, ClaimState]]:
    moves = {
        (_RECORDS[t.before], _RECORDS[t.after])
        for t in TRANSITIONS
        if _RECORDS[t.before] != _RECORDS[t.after]
    }
    # A failed or interrupted prepare rolls back from any of its phases.
    moves |= {(_RECORDS[t.after], ClaimState.UNPREPARE_STARTED) for t in PREPARE}
    return frozenset((a, b) for a, b in moves if a is not None and b is not None and a != b)


RECORD_MOVES = _record_moves()
"""Every change of record state the table allows."""

failpoints.declare(*(point for t in TRANSITIONS for point in t.failpoints))


class TransitionError(AssertionError):
    """A route wrote a record state the lifecycle table does not allow (a bug)."""


def moved(record: ClaimRecord, state: ClaimState, **changes: Any) -> ClaimRecord:
    """``record`` in ``state`` (with ``changes``), if the table allows that move."""
    if record.state != state and (record.state, state) not in RECORD_MOVES:
        raise TransitionError(
            f"claim {record.uid}: {record.state} → {state} is not a transition of the "
            "claim lifecycle"
        )
    return record.with_state(state, **changes)


def phase_of(record: ClaimRecord | None, *, spec_present: bool = False) -> Phase:
    """The furthest phase a record (and the claim's spec file) proves was reached."""
    if record is None:
        return Phase.NONE
    phase = _RECORDED[record.state]
    if phase is Phase.PREPARE_STARTED:
        if spec_present:
            return Phase.SPEC_WRITTEN
        if any(d.prepared for d in record.devices):
            return Phase.DEVICE_PREPARED
    return phase


def _chain(transitions: tuple[Transition, ...]) -> str:
    return " → ".join(t.action for t in transitions)


def lifecycle_lines(width: int = 88) -> list[str]:
    """The prepare and unprepare chains as the README shows them, wrapped at ``width``."""
    lines: list[str] = []
    for label, transitions in (("prepare", PREPARE), ("unprepare", UNPREPARE)):
        words = _chain(transitions).split(" ")
        line = f"{label:<10} "
        for word in words:
            if len(line) + len(word) + 1 > width and line.strip() != label:
                lines.append(line.rstrip())
                line = " " * 11
            line += word + " "
        lines.append(line.rstrip())
    return lines
