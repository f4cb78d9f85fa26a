"""How many cases ported from upstream test tables agree with dralet, for the summary
that ``make test`` prints ("N of M upstream cases agree").

Each ported case records its verdict here; cases that disagree on purpose are listed
in their table with the reason, and are counted (and shown) apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

__all__ = ["Verdict", "record", "terminal_summary"]


@dataclass(frozen=True)
class Verdict:
    table: str
    case: str
    agrees: bool
    reason: str = ""
    """Why dralet disagrees on purpose (empty when it agrees)."""


_VERDICTS: dict[tuple[str, str], Verdict] = {}
_PRINTED = pytest.StashKey[bool]()


def record(verdict: Verdict) -> None:
    _VERDICTS[(verdict.table, verdict.case)] = verdict


def terminal_summary(reporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print the agreement once per session, whichever conftest calls first."""
    if not _VERDICTS or config.stash.get(_PRINTED, False):
        return
    config.stash[_PRINTED] = True
    verdicts = list(_VERDICTS.values())
    agree = sum(v.agrees for v in verdicts)
    reporter.write_sep("=", "upstream test-table cases")
    tables = sorted({v.table for v in verdicts})
    for table in tables:
        mine = [v for v in verdicts if v.table == table]
        reporter.write_line(f"{table}: {sum(v.agrees for v in mine)} of {len(mine)} agree")
    reporter.write_line(f"{agree} of {len(verdicts)} upstream cases agree")
    for verdict in verdicts:
        if not verdict.agrees:
            why = f"on purpose: {verdict.reason}" if verdict.reason else "NOT on purpose (a bug)"
            reporter.write_line(f"  disagrees {why}: {verdict.table} {verdict.case}")
