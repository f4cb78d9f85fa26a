"""The planner as a pure table: one claim as observed in, the steps planned out.

Every row is a ``ClaimView`` the engine can observe under a claim's lock, and the
steps ``plan_repair`` (recovery, cleanup, the start of every RPC path),
``plan_prepare`` and ``plan_unprepare`` plan for it. No engine, no files, no I/O.
"""

from __future__ import annotations

import pytest

from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.node.claims.plan import Action, ClaimView, plan_prepare, plan_repair, plan_unprepare

A = Action
BOOT = "boot-now"
SPEC = {"cdiVersion": "0.6.0", "kind": "dra.example.com/gpu", "devices": []}
NO_RECORD = None


def _view(
    state: ClaimState | None,
    *,
    spec_present: bool = False,
    with_spec: bool = True,
    rebooted: bool = False,
    fail_closed: str = "",
) -> ClaimView:
    record = (
        None
        if state is None
        else ClaimRecord(
            "u",
            "ns",
            "c",
            state,
            cdi_spec=SPEC if with_spec and state is ClaimState.PREPARE_COMPLETED else None,
            boot_id="boot-before" if rebooted else BOOT,
        )
    )
    return ClaimView("u", record, spec_present=spec_present, boot_id=BOOT, fail_closed=fail_closed)


S = ClaimState
ROWS: list[tuple[str, ClaimView, list[Action], list[Action], list[Action]]] = [
    # name, view, plan_repair, plan_prepare, plan_unprepare
    ("nothing", _view(NO_RECORD), [], [A.PREPARE], []),
    (
        "orphan spec",
        _view(NO_RECORD, spec_present=True),
        [A.REMOVE_ORPHAN_SPEC],
        [A.REMOVE_ORPHAN_SPEC, A.PREPARE],
        [A.REMOVE_ORPHAN_SPEC],
    ),
    (
        "half prepared",
        _view(S.PREPARE_STARTED),
        [A.ROLL_BACK],
        [A.ROLL_BACK, A.PREPARE],
        [A.UNPREPARE],
    ),
    (
        "prepared",
        _view(S.PREPARE_COMPLETED, spec_present=True),
        [],
        [A.ANSWER_PREPARED],
        [A.UNPREPARE],
    ),
    (
        "prepared, spec missing",
        _view(S.PREPARE_COMPLETED),
        [A.REWRITE_SPEC],
        [A.REWRITE_SPEC, A.ANSWER_PREPARED],
        [A.UNPREPARE],
    ),
    (
        "prepared, spec missing, none recorded",
        _view(S.PREPARE_COMPLETED, with_spec=False),
        [],
        [A.ANSWER_PREPARED],
        [A.UNPREPARE],
    ),
    (
        "prepared before a reboot",
        _view(S.PREPARE_COMPLETED, rebooted=True),
        [A.REVALIDATE],
        [A.REWRITE_SPEC, A.ANSWER_PREPARED],
        [A.UNPREPARE],
    ),
    (
        "half unprepared",
        _view(S.UNPREPARE_STARTED),
        [A.FINISH_UNPREPARE],
        [A.FINISH_UNPREPARE, A.PREPARE],
        [A.UNPREPARE],
    ),
    (
        "finalizer removal owed",
        _view(S.RELEASED),
        [A.RETRY_FINALIZER_REMOVAL],
        [A.RETRY_FINALIZER_REMOVAL, A.PREPARE],
        [A.UNPREPARE],
    ),
    (
        "failing closed, nothing recorded",
        _view(NO_RECORD, fail_closed="store lost"),
        [],
        [A.REFUSE],
        [A.UNPREPARE_FROM_PROOF],
    ),
    (
        "failing closed, spec on disk",
        _view(NO_RECORD, spec_present=True, fail_closed="store lost"),
        [A.REMOVE_ORPHAN_SPEC],
        [A.REMOVE_ORPHAN_SPEC, A.REFUSE],
        [A.UNPREPARE_FROM_PROOF],
    ),
]


@pytest.mark.parametrize(
    ("view", "repair", "prepare", "unprepare"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_the_planner_plans_each_observed_claim_by_the_table(
    view: ClaimView, repair: list[Action], prepare: list[Action], unprepare: list[Action]
) -> None:
    assert plan_repair(view) == repair
    assert plan_prepare(view) == prepare
    assert plan_unprepare(view) == unprepare


def test_every_claim_step_the_planner_can_plan_has_a_row() -> None:
    planned = {
        action
        for _, view, *plans in ROWS
        for plan in (plan_repair(view), plan_prepare(view), plan_unprepare(view))
        for action in plan
    }
    node_wide = {
        A.RELEASE_ORPHAN_DEVICE,
        A.UNPREPARE_STALE,
        A.RESTORE_FINALIZER,
        A.REMOVE_FOREIGN_FINALIZER,
        A.RESET_CHECKPOINT,
    }
    assert planned == set(Action) - node_wide
