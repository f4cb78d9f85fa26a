"""A run's cleanup on the API stand-in: it deletes exactly the objects carrying its own
run label (and the DeviceClass it made), never another run's or anyone else's."""

from __future__ import annotations

from typing import Any

from dralet import kube
from dralet.apiserver import ApiServer
from dralet.conformance.cluster import objects
from dralet.conformance.cluster.runner import ClusterSettings, Run
from dralet.kube import resources

DRIVER = "gpu.example.com"
NAMESPACE = "default"


def template(name: str, run_id: str) -> dict[str, Any]:
    return objects.resource_claim_template(
        name, namespace=NAMESPACE, version="v1", device_class="c", run_id=run_id
    )


def claim(name: str, run_id: str) -> dict[str, Any]:
    return objects.resource_claim(
        name, namespace=NAMESPACE, version="v1", device_class="c", run_id=run_id
    )


async def test_cleanup_removes_this_runs_objects_only() -> None:
    async with ApiServer(kubernetes_version="1.37") as api:
        for obj in (template("mine", "run1"), template("theirs", "run2"), claim("mine", "run1")):
            api.create(obj, namespace=NAMESPACE)
        unlabelled = template("unlabelled", "run1")
        unlabelled["metadata"]["labels"] = {"app": "other"}
        api.create(unlabelled, namespace=NAMESPACE)
        other_class = objects.device_class("other", driver=DRIVER, version="v1", run_id="run2")
        api.create(other_class)

        client = await kube.connect(url=api.url)
        try:
            settings = ClusterSettings(driver=DRIVER, namespace=NAMESPACE, poll_interval=0.01)
            run = Run(client, settings, run_id="run1")
            run.version = "v1"
            # The stand-in serves no Namespace: the run takes the namespace as existing.
            run.device_class = "dralet-conformance-run1"
            await client.create(
                resources.device_classes("v1"),
                objects.device_class(run.device_class, driver=DRIVER, version="v1", run_id="run1"),
            )
            run.made_class = True
            assert sorted(f"{r.kind}/{n}" for r, n in await run.labelled()) == [
                "DeviceClass/dralet-conformance-run1",
                "ResourceClaim/mine",
                "ResourceClaimTemplate/mine",
            ]
            assert await run.cleanup() == ()
        finally:
            await client.close()

        assert [t["metadata"]["name"] for t in api.list("ResourceClaimTemplate")] == [
            "theirs",
            "unlabelled",
        ]
        assert api.list("ResourceClaim") == []
        assert [c["metadata"]["name"] for c in api.list("DeviceClass")] == ["other"]
