"""The driver pod deleted while the kubelet's NodePrepareResources is in progress, on a
real node: the example backend is made slow on its only device (``--prepare-delay``), the
example pod is created, and once the driver has recorded its intent to prepare the claim
(the record is ``PrepareStarted``) its pod is deleted through the API, as
``kubectl delete pod`` does. The DaemonSet makes a new pod; the kubelet calls it again; it
finishes the prepare (or rolls back what the old one left and prepares anew). The workload
ends Running with its device, and the node then holds exactly one record (prepared) and
one CDI spec, both for this claim; uninstalling leaves neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.install import release
from tests.install.node import InstallNode
from tests.install.operator import Operator, until, values
from tests.k8sapi import ClusterApi

from dralet.checkpoint import database
from dralet.checkpoint.model import ClaimRecord, ClaimState

pytestmark = [pytest.mark.install, pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(900)]

PREPARE_DELAY_S = 20
"""How long preparing the node's one device takes: long enough to delete the driver pod
while it runs, short enough that the new pod's prepare is quick."""


def _records(node: InstallNode) -> dict[str, ClaimRecord]:
    store = node.kubelet.plugins_dir / release.DRIVER / "claims.db"
    return dict(database.read_only_snapshot(store).checkpoint.claims)


def _specs(node: InstallNode) -> list[Path]:
    return sorted(node.kubelet.cdi_dir.glob("*.json"))


def _preparing(node: InstallNode) -> ClaimRecord | None:
    started = [r for r in _records(node).values() if r.state is ClaimState.PREPARE_STARTED]
    return started[0] if started else None


def _replaced(api: ClusterApi, node: InstallNode, old_uid: str) -> dict[str, Any] | None:
    pod = release.ready_driver_pod(api, node.name)
    return pod if pod is not None and pod["metadata"]["uid"] != old_uid else None


def test_a_driver_pod_deleted_during_a_prepare_is_replaced_and_the_claim_prepared_once(
    k8s_api: ClusterApi, node: InstallNode, operator: Operator
) -> None:
    api = k8s_api
    release.install_driver(
        operator,
        [node],
        *values("backend.flags.gpus=1"),
        "--set-string",
        f"backend.flags.prepare-delay=gpu-0={PREPARE_DELAY_S}",
    )
    old = release.driver_pod(api, node.name)
    assert old is not None

    operator.install(
        release.EXAMPLE,
        release.EXAMPLE_NAMESPACE,
        *values("driver.enabled=false", "examples.enabled=true"),
    )
    intent = until(lambda: _preparing(node), "the driver's prepare intent recorded", 120)
    # kubectl -n dralet delete pod <the driver pod>, while its prepare sleeps.
    api.delete("Pod", old["metadata"]["name"], namespace=release.NAMESPACE)
    new = until(
        lambda: _replaced(api, node, old["metadata"]["uid"]),
        "a new driver pod Ready",
        release.WAIT_S,
    )
    consumer = operator.wait_ready(release.EXAMPLE_NAMESPACE, release.EXAMPLE_POD, release.WAIT_S)
    assert sum(c.get("restartCount", 0) for c in consumer["status"]["containerStatuses"]) == 0
    output = until(
        lambda: operator.logs(release.EXAMPLE_NAMESPACE, release.EXAMPLE_POD) or None,
        "the example's output",
        60,
    )
    assert "EXAMPLE_GPU_0=GPU-" in output and "example-gpu0" in output, output

    # What the node holds: the one claim, prepared once, by the new pod.
    [claim] = release.example_claims(api)
    assert claim["metadata"]["uid"] == intent.uid
    assert release.prepared(claim)
    records = _records(node)
    assert list(records) == [intent.uid], records
    assert records[intent.uid].state is ClaimState.PREPARE_COMPLETED
    assert [d.device for d in records[intent.uid].devices] == ["gpu-0"]
    specs = _specs(node)
    assert len(specs) == 1 and intent.uid in specs[0].name, specs
    new_log = operator.logs(release.NAMESPACE, new["metadata"]["name"], "plugin")
    assert '"prepared"' in new_log, new_log[-2000:]
    # What the new pod found of the old one's prepare (a recovery action, if any).
    found = [line for line in new_log.splitlines() if "recovery" in line]
    print(f"\nthe new driver pod's recovery: {found or 'nothing to do'}")

    # Uninstalled: no record, no spec, no finalizer.
    release.uninstall_all(operator, api)
    assert not _specs(node)
    assert not _records(node)
