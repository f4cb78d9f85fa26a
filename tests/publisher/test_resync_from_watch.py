"""The publisher's resyncs read the live slices from its own watch: an idle driver lists
its slices once, for the watch, and never again while the watch runs; a change someone
else makes still reaches the next reconcile, and a write refused as stale re-reads from
the API server."""

from __future__ import annotations

from typing import Any

from dralet import kube
from dralet.apiserver import ApiServer
from dralet.metrics import DriverMetrics
from tests.publisher.test_publisher import FakeBackend, eventually, live, node_uid, publisher

__all__ = ["node_uid"]  # the fixture, used by name

RESYNC_S = 0.05


def _counting_lists(client: kube.KubeClient) -> list[str]:
    """Each resource ``client.list`` is asked for, from now on."""
    calls: list[str] = []
    real = client.list

    async def counted(resource: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(resource.plural)
        return await real(resource, *args, **kwargs)

    client.list = counted  # type: ignore[method-assign]
    return calls


async def test_idle_resyncs_list_nothing_once_the_watch_has_listed(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str, metrics: DriverMetrics
) -> None:
    lists = _counting_lists(client)
    backend = FakeBackend(3)
    pub = publisher(client, backend, metrics, resync_period=RESYNC_S)
    pub.start()
    try:
        await eventually(lambda: len(live(apiserver)) == 1, "pool published")
        await eventually(lambda: pub.reconciles >= 3, "resyncs after the first")
        settled = lists.count("resourceslices")
        # The first reconcile and the watch may each list once; the resyncs never.
        assert settled <= 2, lists
        idle_from = pub.reconciles
        await eventually(lambda: pub.reconciles >= idle_from + 10, "ten more resyncs")
        assert lists.count("resourceslices") == settled, lists

        # Another writer's change arrives through the watch: the next reconcile puts
        # the slice back as the backend says, still without a list.
        [published] = live(apiserver)
        name = published["metadata"]["name"]
        apiserver.delete("ResourceSlice", name)
        await eventually(
            lambda: len(live(apiserver)) == 1 and live(apiserver)[0]["metadata"]["name"] != name,
            "the deleted slice published again",
        )
        assert lists.count("resourceslices") == settled, lists
    finally:
        await pub.stop()


async def test_a_write_refused_as_stale_is_retried_from_a_fresh_list(
    apiserver: ApiServer, client: kube.KubeClient, node_uid: str, metrics: DriverMetrics
) -> None:
    backend = FakeBackend(3)
    pub = publisher(client, backend, metrics, resync_period=3600.0)
    pub.start()
    try:
        await eventually(lambda: len(live(apiserver)) == 1, "pool published")
        lists = _counting_lists(client)
        real_patch = client.merge_patch
        interfered = False

        async def patch_after_someone_else(*args: Any, **kwargs: Any) -> dict[str, Any]:
            # Someone else's write lands between the reconcile's read and its own.
            nonlocal interfered
            if not interfered:
                interfered = True
                apiserver.patch(
                    "ResourceSlice",
                    live(apiserver)[0]["metadata"]["name"],
                    {"metadata": {"labels": {"touched": "yes"}}},
                )
            return await real_patch(*args, **kwargs)

        client.merge_patch = patch_after_someone_else  # type: ignore[method-assign]
        backend.set(3, model="H100")
        pub.trigger()
        await eventually(
            lambda: live(apiserver)[0]["spec"]["pool"]["generation"] == 1, "new generation"
        )
        assert metrics.api_retries.labels(reason="conflict")._value.get() == 1
        assert lists.count("resourceslices") == 1, lists
    finally:
        await pub.stop()
