"""A claim's lifecycle on a node, as data: the phases and the transitions between them.

Pure: no I/O. The engine walks these transitions in this order (``execute``), recovery
and ``dralet audit`` read the phase a crash left from the record (``phase_of``), and the
README's "What dralet does for each claim" is checked against ``lifecycle_lines`` by a
test. Each transition names the durable fact it leaves behind: the record state it
writes, or the file it writes or removes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dralet.checkpoint.model import ClaimRecord, ClaimState

__all__ = [
    "PREPARE",
    "TRANSITIONS",
    "UNPREPARE",
    "Phase",
    "Transition",
    "lifecycle_lines",
    "phase_of",
]


class Phase(enum.StrEnum):
    NONE = "none"
    PREPARE_STARTED = "PrepareStarted"
    FINALIZER_ADDED = "FinalizerAdded"
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


PREPARE: tuple[Transition, ...] = (
    Transition(
        Phase.NONE,
        Phase.PREPARE_STARTED,
        "PrepareStarted (devices chosen, exclusivity checked)",
        "record PrepareStarted, finalizer marked as possibly added",
    ),
    Transition(
        Phase.PREPARE_STARTED,
        Phase.FINALIZER_ADDED,
        "finalizer on the ResourceClaim",
        "finalizer on the API object",
    ),
    Transition(
        Phase.FINALIZER_ADDED,
        Phase.DEVICE_PREPARED,
        "backend.prepare_claim (each device's state kept for the completion write)",
        "the backend holds the devices (a crash from here on asks it for their states)",
    ),
    Transition(
        Phase.DEVICE_PREPARED,
        Phase.SPEC_WRITTEN,
        "CDI spec written atomically",
        "CDI spec file",
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
    ),
    Transition(
        Phase.DEVICES_RELEASED,
        Phase.RELEASED,
        "finalizer removed",
        "record Released while the finalizer removal is retried",
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
