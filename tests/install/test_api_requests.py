"""What one driver costs the API server, from its audit log: the requests an idle driver
makes per minute, and those of one claim's lifecycle (the example pod's claim prepared
and unprepared), by verb and resource. docs/install.md projects them to a large cluster.

An idle driver sends nothing: its open watches started before the window, and the
publisher's resync (every ``PublisherSettings.resync_period``, 30s) reads its slices from
its own ResourceSlice watch instead of listing them; a watch the API server ends (after
its ``--min-request-timeout``, 30 to 60 minutes) is the only request that may show up.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import Operator, until
from tests.install.requests import by_verb_and_resource, driver_requests
from tests.k8sapi import ClusterApi

from dralet.node.publisher import PublisherSettings

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(900)]

IDLE_WINDOW_S = 120.0
"""How long the idle driver is watched (the informers' resyncs and renewals show up)."""
SETTLE_S = 10.0
"""After Ready, before the idle window: the start-up's list and publish are done."""


def _now() -> datetime:
    return datetime.now(UTC)


def test_an_idle_driver_only_reads_its_slices_and_a_claim_costs_a_few_requests(
    k8s_api: ClusterApi, node: InstallNode, operator: Operator
) -> None:
    api = k8s_api
    release.install_driver(operator, [node])
    time.sleep(SETTLE_S)
    idle_start = _now()
    time.sleep(IDLE_WINDOW_S)
    idle_end = _now()

    claim_start = _now()
    release.install_example(operator)
    operator.uninstall(release.EXAMPLE, release.EXAMPLE_NAMESPACE)
    until(lambda: not release.example_claims(api) or None, "the claim gone", release.WAIT_S)
    claim_end = _now()
    operator.uninstall(release.RELEASE, release.NAMESPACE)

    events = api.cluster.audit_events()
    idle = by_verb_and_resource(driver_requests(events, idle_start, idle_end))
    per_minute = sum(idle.values()) * 60 / IDLE_WINDOW_S
    lifecycle = by_verb_and_resource(driver_requests(events, claim_start, claim_end))
    lifecycle_s = (claim_end - claim_start).total_seconds()
    print(f"\nidle driver, {IDLE_WINDOW_S:.0f}s: {dict(idle)} = {per_minute:.2f}/min")
    print(f"one claim's lifecycle ({lifecycle_s:.0f}s): {dict(lifecycle)}")
    # Several resync periods passed, and no resync listed anything.
    assert 3 * PublisherSettings().resync_period <= IDLE_WINDOW_S
    assert set(idle) <= {"watch resourceslices"}, dict(idle)
    # Prepare adds the finalizer, unprepare removes it: one patch each, no other write.
    assert lifecycle["patch resourceclaims"] == 2, dict(lifecycle)
    writes = {k for k in lifecycle if k.split()[0] in ("create", "update", "patch", "delete")}
    assert writes == {"patch resourceclaims"}, dict(lifecycle)
