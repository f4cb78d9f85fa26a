"""Kill -9 at every failpoint, restart, let the kubelet retry, and audit the node.

The CI-size campaign (200 runs, every declared failpoint armed round-robin) runs by
default; ``DRALET_CRASH_RUNS=5000`` makes it nightly-size and ``DRALET_CRASH_SEED=N
DRALET_CRASH_RUNS=1`` reruns one failing run alone (its seed is printed). Every other
round over the failpoints runs the example driver behind the strict backend
(``dralet.testing.strict``), whose broken-promise log counts as a violation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat
from pathlib import Path

import pytest

from dralet import failpoints
from dralet.checkpoint import database
from tests.harness import crash

pytestmark = pytest.mark.crash

SECONDS_PER_RUN_BUDGET = 3.0
"""Generous wall time per run for the campaign's timeout (measured: about 0.45 s each)."""
CAMPAIGN_TIMEOUT = max(900, int(crash.CrashSettings.from_env().runs * SECONDS_PER_RUN_BUDGET))
SHOWN_FAILURES = 5
NODE_ROUNDS = 4
"""CI size on the device-node drivers: every failpoint armed four times."""


def test_failpoints_are_scheduled_round_robin() -> None:
    names = crash.declared_failpoints()
    assert len(names) >= 20
    for base in (0, 1, 977):
        assert {crash.failpoint_for(base + i) for i in range(len(names))} == set(names)
    # Every failpoint the ledger puts around calls out of the process is declared.
    for name in (
        "backend.prepare.before",
        "backend.prepare.after",
        "backend.release.before",
        "backend.release.after",
        "api.add-finalizer.before",
        "api.add-finalizer.after",
        "api.remove-finalizer.before",
        "api.remove-finalizer.after",
        "store.commit.before",
        "store.commit.after",
    ):
        assert name in failpoints.known()


def test_settings_come_from_the_environment() -> None:
    settings = crash.CrashSettings.from_env(
        {crash.ENV_RUNS: "5000", crash.ENV_SEED: "1234", crash.ENV_CONCURRENCY: "3"}
    )
    assert (settings.runs, settings.base_seed, settings.concurrency) == (5000, 1234, 3)
    assert crash.CrashSettings.from_env({}).runs == crash.CrashSettings().runs
    result = crash.RunResult(seed=1234, failpoint="x", nth=1)
    assert result.rerun(settings).startswith("DRALET_CRASH_SEED=1234 DRALET_CRASH_RUNS=1 ")


@pytest.mark.timeout(CAMPAIGN_TIMEOUT)
async def test_crash_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = crash.CrashSettings.from_env()
    report = await crash.run_many(settings, root=tmp_path / "crash")
    with capsys.disabled():
        print(f"\n{report.summary()}\n{report.coverage_table()}")
    assert 0 < sum(r.strict for r in report.results) < len(report.results) or settings.runs < 60
    failures = "\n\n".join(r.describe(settings) for r in report.failed[:SHOWN_FAILURES])
    assert not report.failed, f"{len(report.failed)} runs broke an invariant:\n{failures}"
    if settings.runs >= len(report.known):
        assert report.never_reached == []
        assert report.never_killed == [], "armed round-robin, yet these never fired"


CHECKPOINT_RUNS = 24
"""Runs per failpoint around the copy of the store's log into its database file."""


@pytest.mark.timeout(CAMPAIGN_TIMEOUT)
@pytest.mark.parametrize("point", database.CHECKPOINT_FAILPOINTS)
async def test_crash_runs_between_the_log_and_the_database(
    short_tmp: Path, capsys: pytest.CaptureFixture[str], point: str
) -> None:
    """Kills between a commit in the write-ahead log and its copy into the database file
    (and just after the copy), which a start reaches at the end of its recovery: at the
    first hit, and in half the runs again at the first restart, so a restart's recovery
    is killed there too."""
    settings = crash.CrashSettings.from_env(runs=CHECKPOINT_RUNS)
    settings = dataclasses.replace(settings, max_nth=1)
    gate = asyncio.Semaphore(settings.concurrency)

    async def one(index: int) -> crash.RunResult:
        chance = 1.0 if index % 2 else 0.0
        run = dataclasses.replace(settings, recovery_crash_chance=chance)
        async with gate:
            return await crash.run_one(
                run, seed=settings.base_seed + index, root=short_tmp / "crash", names=[point]
            )

    results = await asyncio.gather(*(one(i) for i in range(settings.runs)))
    kills = [len(r.killed_at) for r in results]
    with capsys.disabled():
        print(f"\n{point}: {len(results)} runs, {sum(kills)} kills, twice in {kills.count(2)}")
    failed = [r for r in results if r.violations]
    failures = "\n\n".join(r.describe(settings) for r in failed[:SHOWN_FAILURES])
    assert not failed, f"{len(failed)} runs broke an invariant:\n{failures}"
    assert all(k >= 1 for k in kills), "armed at the first hit, yet it never fired"
    assert any(k >= 2 for k in kills), "never killed again during a restart's recovery"


def _can_mknod(directory: Path) -> bool:
    try:
        os.mknod(directory / "probe", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return False
    return True


@pytest.mark.timeout(CAMPAIGN_TIMEOUT)
@pytest.mark.parametrize("target", ["hostdev", "nvidia", "nvidia-mig"])
async def test_crash_runs_on_device_nodes(
    short_tmp: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """The same campaign against the drivers that hand out device nodes made for the run:
    hostdev, and the NVIDIA driver over the fake NVML, with whole GPUs and with MIG
    devices made at prepare."""
    if not _can_mknod(short_tmp):
        pytest.skip("making device nodes needs CAP_MKNOD")
    settings = crash.CrashSettings.from_env(runs=NODE_ROUNDS * len(crash.declared_failpoints()))
    settings = dataclasses.replace(settings, target=target)
    report = await crash.run_many(settings, root=short_tmp / "crash")
    with capsys.disabled():
        print(f"\n{target}: {report.summary()}\n{report.coverage_table()}")
    failures = "\n\n".join(r.describe(settings) for r in report.failed[:SHOWN_FAILURES])
    assert not report.failed, f"{len(report.failed)} runs broke an invariant:\n{failures}"
    if settings.runs >= len(report.known):
        assert report.never_reached == []
        assert report.never_killed == [], "armed round-robin, yet these never fired"
