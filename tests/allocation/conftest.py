"""Prints the upstream test-table agreement at the end of the run."""

from __future__ import annotations

import pytest
from tests.upstream_agreement import terminal_summary


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    terminal_summary(terminalreporter, config)
