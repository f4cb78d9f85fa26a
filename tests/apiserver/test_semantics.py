"""The stand-in's Kubernetes semantics, driven through dralet.kube (kubernetes.aio)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import pytest

from dralet import kube
from dralet.apiserver import ApiServer, schema_errors
from dralet.apiserver.kinds import major_minor
from dralet.kube import resources, watching
from dralet.metrics import DriverMetrics
from tests.kubeobjects import allocation, claim, node


def slice_(
    version: str, *, name: str = "", node_name: str = "node-a", driver: str = "gpu.example.com"
) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "gpu-0", "attributes": {"model": {"string": "A100"}}}
    if version == "v1beta1":
        device = {"name": "gpu-0", "basic": {"attributes": {"model": {"string": "A100"}}}}
    metadata = {"name": name} if name else {"generateName": f"{node_name}-{driver}-"}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


async def test_discovery_serves_the_versions_of_the_kubernetes_release(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    served = await client.served_versions("resource.k8s.io")
    expected = {
        "1.32": ["v1beta1"],
        # v1beta1 is not served from 1.38 (k8s.io/api@v0.38.0-beta.0
        # resource/v1beta1/zz_generated.prerelease-lifecycle.go)
        "1.38": ["v1", "v1beta2"],
    }.get(apiserver.settings.kubernetes_version, ["v1", "v1beta2", "v1beta1"])
    assert served == expected
    assert await kube.negotiate_resource_version(client) == expected[0]
    version = await client.request("GET", "/version")
    assert version["gitVersion"].startswith(f"v{apiserver.settings.kubernetes_version}.")
    for v in expected:
        listed = await client.request("GET", f"/apis/resource.k8s.io/{v}")
        assert {
            "resourceclaims",
            "resourceclaims/status",
            "resourceslices",
            "deviceclasses",
            "resourceclaimtemplates",
        } <= {r["name"] for r in listed["resources"]}
    core = await client.request("GET", "/api/v1")
    assert "nodes" in {r["name"] for r in core["resources"]}


async def test_unserved_version_is_not_found(apiserver: ApiServer, client: kube.KubeClient) -> None:
    unserved = [v for v in ("v1", "v1beta1") if v not in apiserver.versions]
    if not unserved:
        pytest.skip("v1 and v1beta1 are served by this release")
    for version in unserved:
        with pytest.raises(kube.ApiError) as caught:
            await client.list(resources.resource_slices(version))
        assert caught.value.not_found


async def test_create_sets_server_fields_and_refuses_duplicates(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    first = await client.create(resources.resource_slices(v), slice_(v))
    second = await client.create(resources.resource_slices(v), slice_(v))
    for made in (first, second):
        meta = made["metadata"]
        assert meta["name"].startswith("node-a-gpu.example.com-")
        assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert first["metadata"]["name"] != second["metadata"]["name"]
    with pytest.raises(kube.ApiError) as caught:
        await client.create(resources.resource_slices(v), slice_(v, name=first["metadata"]["name"]))
    assert caught.value.already_exists and caught.value.code == 409


async def test_stale_resource_version_conflicts(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    slices = resources.resource_slices(v)
    made = await client.create(slices, slice_(v, name="s1"))
    stale = made["metadata"]["resourceVersion"]
    await client.merge_patch(
        slices, "s1", {"metadata": {"labels": {"a": "1"}}}, resource_version=stale
    )
    with pytest.raises(kube.ApiError) as caught:
        await client.merge_patch(
            slices, "s1", {"metadata": {"labels": {"a": "2"}}}, resource_version=stale
        )
    assert caught.value.conflict and caught.value.reason == "Conflict"
    old = dict(made)
    with pytest.raises(kube.ApiError) as put:
        await client.request("PUT", slices.path(name="s1"), body=old)
    assert put.value.conflict
    with pytest.raises(kube.ApiError) as delete:
        await client.delete(slices, "s1", resource_version=stale)
    assert delete.value.conflict


async def test_generation_bumps_only_on_spec_change(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    slices = resources.resource_slices(v)
    await client.create(slices, slice_(v, name="s1"))
    labelled = await client.merge_patch(slices, "s1", {"metadata": {"labels": {"a": "1"}}})
    assert labelled["metadata"]["generation"] == 1
    bumped = await client.merge_patch(slices, "s1", {"spec": {"pool": {"generation": 1}}})
    assert bumped["metadata"]["generation"] == 2
    same = await client.merge_patch(slices, "s1", {"spec": {"pool": {"generation": 1}}})
    assert same["metadata"]["resourceVersion"] == bumped["metadata"]["resourceVersion"]


async def test_json_patch_and_server_side_apply(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    slices = resources.resource_slices(v)
    await client.create(slices, slice_(v, name="s1"))
    patched = await client.json_patch(
        slices, "s1", [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]
    )
    assert patched["metadata"]["labels"] == {"x": "y"}
    with pytest.raises(kube.ApiError) as caught:
        await client.json_patch(
            slices, "s1", [{"op": "test", "path": "/metadata/labels/x", "value": "z"}]
        )
    assert caught.value.invalid
    applied = await client.apply(slices, slice_(v, name="s2"))
    assert applied["metadata"]["uid"]
    again = await client.apply(
        slices, {**slice_(v, name="s2"), "metadata": {"name": "s2", "labels": {"k": "v"}}}
    )
    assert again["metadata"]["labels"] == {"k": "v"}
    assert again["metadata"]["uid"] == applied["metadata"]["uid"]


async def test_selectors_and_deletecollection(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    slices = resources.resource_slices(v)
    await client.create(slices, slice_(v, name="a1", node_name="node-a"))
    await client.create(slices, slice_(v, name="b1", node_name="node-b"))
    await client.create(slices, slice_(v, name="b2", node_name="node-b", driver="nic.example.com"))
    await client.merge_patch(slices, "b2", {"metadata": {"labels": {"tier": "fast"}}})

    async def names(**selectors: str) -> list[str]:
        listed = await client.list(slices, **selectors)
        return sorted(i["metadata"]["name"] for i in listed["items"])

    assert await names(field_selector="spec.nodeName=node-b") == ["b1", "b2"]
    assert await names(field_selector="spec.nodeName=node-b,spec.driver=gpu.example.com") == ["b1"]
    assert await names(field_selector="spec.driver!=gpu.example.com") == ["b2"]
    assert await names(field_selector="metadata.name=a1") == ["a1"]
    assert await names(label_selector="tier in (fast,slow)") == ["b2"]
    assert await names(label_selector="!tier") == ["a1", "b1"]
    with pytest.raises(kube.ApiError) as caught:
        await names(field_selector="spec.bogus=1")
    assert caught.value.code == 400
    await client.delete_collection(slices, field_selector="spec.nodeName=node-b")
    assert await names() == ["a1"]


async def test_claim_status_is_a_subresource(apiserver: ApiServer, client: kube.KubeClient) -> None:
    v = apiserver.preferred_version
    claims = resources.resource_claims(v)
    await client.create(
        claims, {**claim("c1", v), "status": {"reservedFor": []}}, namespace="default"
    )
    status = allocation(driver="gpu.example.com", pool="node-a", device="gpu-0")
    ignored = await client.merge_patch(claims, "c1", {"status": status}, namespace="default")
    assert not ignored.get("status")
    written = await client.merge_patch(
        claims, "c1", {"status": status}, namespace="default", subresource="status"
    )
    assert written["status"]["reservedFor"][0]["name"] == "pod-a"
    with pytest.raises(kube.ApiError) as caught:
        await client.merge_patch(
            claims,
            "c1",
            {"status": {"allocation": None}},
            namespace="default",
            subresource="status",
        )
    assert caught.value.invalid, "reservedFor without allocation is refused"


async def test_claims_across_namespaces(apiserver: ApiServer, client: kube.KubeClient) -> None:
    v = apiserver.preferred_version
    apiserver.create(claim("c1", v, namespace="ns1"))
    apiserver.create(claim("c1", v, namespace="ns2"))
    assert len(await kube.list_resource_claims(client)) == 2
    listed = await client.list(resources.resource_claims(v), namespace="ns1")
    assert [i["metadata"]["namespace"] for i in listed["items"]] == ["ns1"]
    assert listed["items"][0]["kind"] == "ResourceClaim"


async def test_invalid_objects_are_refused_with_every_error(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    bad = slice_(v, name="s1")
    bad["spec"]["bogusField"] = 1
    bad["spec"]["pool"]["generation"] = "zero"
    with pytest.raises(kube.ApiError) as caught:
        await client.create(resources.resource_slices(v), bad)
    error = caught.value
    assert error.invalid and error.reason == "Invalid" and error.status["kind"] == "Status"
    assert "bogusField" in error.message and "zero" in error.message
    wrong_shape = slice_("v1beta1" if v != "v1beta1" else "v1", name="s2")
    wrong_shape["apiVersion"] = f"resource.k8s.io/{v}"
    with pytest.raises(kube.ApiError) as shape:
        await client.create(resources.resource_slices(v), wrong_shape)
    assert shape.value.invalid
    assert apiserver.list("ResourceSlice") == []


async def test_error_bodies_are_status_with_exact_content_type(apiserver: ApiServer) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{apiserver.url}/apis/resource.k8s.io/v1beta1/resourceslices/missing"
        ) as response,
    ):
        assert response.status == 404
        assert response.headers["Content-Type"] == "application/json"
        body = await response.json()
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404


async def test_finalizers_hold_deletion(apiserver: ApiServer, client: kube.KubeClient) -> None:
    v = apiserver.preferred_version
    claims = resources.resource_claims(v)
    made = await client.create(
        claims,
        {**claim("c1", v), "metadata": {"name": "c1", "finalizers": ["a.example.com/x"]}},
        namespace="default",
    )
    held = await client.delete(claims, "c1", namespace="default")
    assert held["metadata"]["deletionTimestamp"]
    assert (await client.get(claims, "c1", namespace="default"))["metadata"]["uid"] == made[
        "metadata"
    ]["uid"]
    await client.merge_patch(claims, "c1", {"metadata": {"finalizers": None}}, namespace="default")
    with pytest.raises(kube.ApiError) as caught:
        await client.get(claims, "c1", namespace="default")
    assert caught.value.not_found


async def _next(changes: Any) -> watching.Change:
    return await asyncio.wait_for(changes.__anext__(), timeout=10)


async def test_watch_resumes_and_relists_after_compaction(
    apiserver: ApiServer, client: kube.KubeClient, metrics: DriverMetrics
) -> None:
    v = apiserver.preferred_version
    slices = resources.resource_slices(v)
    await client.create(slices, slice_(v, name="s1"))
    changes = watching.follow(client, slices, field_selector="spec.nodeName=node-a")
    async with contextlib.aclosing(changes):
        first = await _next(changes)
        assert first.type == watching.SYNC
        assert [o["metadata"]["name"] for o in first.objects] == ["s1"]
        await client.create(slices, slice_(v, name="s2"))
        await client.create(slices, slice_(v, name="other", node_name="node-b"))
        added = await _next(changes)
        assert (added.type, added.object["metadata"]["name"]) == ("ADDED", "s2")  # type: ignore[index]
        apiserver.compact()  # ends the watch; resuming from an old version is 410 Gone
        await client.delete(slices, "s1")
        relisted = await _next(changes)
        assert relisted.type == watching.SYNC
        assert [o["metadata"]["name"] for o in relisted.objects] == ["s2"]
        await client.delete(slices, "s2")
        deleted = await _next(changes)
        assert (deleted.type, deleted.object["metadata"]["name"]) == ("DELETED", "s2")  # type: ignore[index]
    assert metrics.api_retries.labels(reason="gone")._value.get() >= 1


async def test_watch_query_booleans_parse_like_go(apiserver: ApiServer) -> None:
    apiserver.create(node("node-a"))
    for spelling in ("true", "True", "1", "t"):
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{apiserver.url}/api/v1/nodes",
                params={"watch": spelling, "timeoutSeconds": "1"},
            ) as response,
        ):
            line = await response.content.readline()
        assert b'"ADDED"' in line, spelling
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{apiserver.url}/api/v1/nodes", params={"watch": "yes"}) as response,
    ):
        assert response.status == 400


def test_schema_errors_are_reported_per_version() -> None:
    flat = slice_("v1", name="s1")
    assert schema_errors(flat, kubernetes_version="1.34") == []
    assert schema_errors(flat, kubernetes_version="1.32"), "v1 is not in 1.32"
    nested = slice_("v1beta1", name="s1")
    assert schema_errors(nested, kubernetes_version="1.32") == []


async def test_a_name_with_two_slashes_is_refused_from_1_38(
    apiserver: ApiServer, client: kube.KubeClient
) -> None:
    v = apiserver.preferred_version
    body = slice_(v, name="s1")
    attributes = (
        body["spec"]["devices"][0]["basic"]["attributes"]
        if v == "v1beta1"
        else body["spec"]["devices"][0]["attributes"]
    )
    attributes["gpu.example.com/arch/family"] = {"string": "hopper"}
    if major_minor(apiserver.settings.kubernetes_version) < (1, 38):
        await client.create(resources.resource_slices(v), body)
        return
    with pytest.raises(kube.ApiError) as caught:
        await client.create(resources.resource_slices(v), body)
    assert caught.value.invalid
    assert "'gpu.example.com/arch/family': must not contain more than one slash" in (
        caught.value.message
    )
