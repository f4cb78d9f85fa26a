"""What one driver costs the API server, from its audit log: the requests an idle driver
makes per minute, and those of one claim's lifecycle (the example pod's claim prepared
and unprepared), by verb and resource. The README projects them to a large cluster.

An idle driver writes nothing: besides its open watches (started before the window),
its only requests are the publisher's resync, one ``list resourceslices`` (of its own
node and driver) per ``PublisherSettings.resync_period`` (30s). That list repeats what
the publisher's own ResourceSlice watch already delivers; serving the resync from the
watch would remove it (an engine change, not made here).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

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
    k8s_api: ClusterApi, node: InstallNode, helm: str, tmp_path: Path
) -> None:
    api = k8s_api
    operator = Operator(helm, api, tmp_path / "helm")
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
    assert set(idle) <= {"list resourceslices", "watch resourceslices"}, dict(idle)
    resyncs = IDLE_WINDOW_S / PublisherSettings().resync_period
    assert idle["list resourceslices"] <= resyncs + 1, dict(idle)
    # Prepare adds the finalizer, unprepare removes it: one patch each, no other write.
    assert lifecycle["patch resourceclaims"] == 2, dict(lifecycle)
    writes = {k for k in lifecycle if k.split()[0] in ("create", "update", "patch", "delete")}
    assert writes == {"patch resourceclaims"}, dict(lifecycle)
