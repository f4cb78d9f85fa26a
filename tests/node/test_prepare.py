"""Prepare and unprepare through the real gRPC protocol, as a kubelet drives them."""

from __future__ import annotations

import json
import os
import uuid

import grpc
import pytest

from dralet.kubelet import KubeletClaim, PluginConnection
from dralet.testing.claims import allocated_claim
from tests.node.conftest import Node


def kclaim(claim: dict[str, object]) -> KubeletClaim:
    meta = claim["metadata"]
    assert isinstance(meta, dict)
    return KubeletClaim(meta["namespace"], meta["uid"], meta["name"])


async def test_prepare_writes_spec_and_returns_qualified_cdi_ids(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-1")]))
    result = await node.plugin.prepare([kclaim(claim)])
    assert result.kubelet_error == ""
    uid = claim["metadata"]["uid"]
    (device,) = result.claims[uid].devices
    assert (device.pool_name, device.device_name, device.request_names) == (
        "node-a",
        "gpu-1",
        ("gpu",),
    )
    assert device.cdi_device_ids == (f"gpu.example.com/claim={uid}-gpu-1",)
    spec_path = node.settings.cdi_dir / f"gpu.example.com-claim_{uid}.json"
    spec = json.loads(spec_path.read_text())
    assert spec["kind"] == "gpu.example.com/claim"
    assert spec["cdiVersion"] == "0.5.0"  # host paths and digit-leading names need 0.5.0
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-1"]
    assert node.backend.in_use() == {"gpu-1": uid}
    assert "gpu.example.com/prepared" in node.claims.finalizers("default", "c1")


async def test_prepare_twice_returns_same_ids_and_writes_once(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0"), ("gpu", "gpu-2")]))
    first = await node.plugin.prepare([kclaim(claim)])
    uid = claim["metadata"]["uid"]
    spec_path = node.settings.cdi_dir / f"gpu.example.com-claim_{uid}.json"
    before = os.stat(spec_path)
    commits = node.driver.metrics.registry.get_sample_value("dralet_store_commits_total")
    node.claims.calls.clear()
    second = await node.plugin.prepare([kclaim(claim)])
    assert second.claims == first.claims
    after = os.stat(spec_path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # Answered from the record: nothing was committed to the store.
    assert node.driver.metrics.registry.get_sample_value("dralet_store_commits_total") == commits
    assert node.claims.calls == []  # the cached result needs no API call


async def test_prepare_rewrites_a_missing_spec_before_answering(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    first = await node.plugin.prepare([kclaim(claim)])
    uid = claim["metadata"]["uid"]
    spec_path = node.settings.cdi_dir / f"gpu.example.com-claim_{uid}.json"
    content = spec_path.read_bytes()
    spec_path.unlink()  # a reboot clears /var/run/cdi on real nodes
    second = await node.plugin.prepare([kclaim(claim)])
    assert second.claims == first.claims
    assert spec_path.read_bytes() == content


async def test_both_versions_answer_identically(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-3")]))
    v1beta1 = PluginConnection(
        info=node.plugin.info,
        service="v1beta1.DRAPlugin",
        registration_socket=node.plugin.registration_socket,
    )
    try:
        assert node.plugin.service == "v1.DRAPlugin"
        via_v1 = await node.plugin.prepare([kclaim(claim)])
        via_v1beta1 = await v1beta1.prepare([kclaim(claim)])
        assert via_v1.claims == via_v1beta1.claims
        unknown = KubeletClaim("default", str(uuid.uuid4()), "gone")
        assert (await node.plugin.unprepare([unknown])).claims == (
            await v1beta1.unprepare([unknown])
        ).claims
        assert (await v1beta1.unprepare([kclaim(claim)])).claims == {claim["metadata"]["uid"]: ""}
        assert node.backend.in_use() == {}
    finally:
        await v1beta1.close()


async def test_unprepare_unknown_and_twice_is_ok_with_an_entry(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    stranger = KubeletClaim("default", str(uuid.uuid4()), "never-prepared")
    result = await node.plugin.unprepare([stranger])
    assert result.claims == {stranger.uid: ""}
    assert result.kubelet_error == ""
    await node.plugin.prepare([kclaim(claim)])
    assert (await node.plugin.unprepare([kclaim(claim)])).claims == {uid: ""}
    again = await node.plugin.unprepare([kclaim(claim)])
    assert again.claims == {uid: ""}
    assert again.kubelet_error == ""
    assert node.backend.in_use() == {}
    assert not list(node.settings.cdi_dir.glob("*.json"))
    await node.driver.engine.settled()
    assert node.claims.finalizers("default", "c1") == []


async def test_spec_is_unlinked_before_the_device_is_released(node: Node) -> None:
    claim = node.claims.add(allocated_claim("c1"))
    uid = claim["metadata"]["uid"]
    await node.plugin.prepare([kclaim(claim)])
    spec_path = node.settings.cdi_dir / f"gpu.example.com-claim_{uid}.json"
    seen: list[tuple[str, bool]] = []
    original = node.backend.release

    async def observing_release(*args: object, **kwargs: object) -> None:
        seen.append(("release", spec_path.exists()))
        await original(*args, **kwargs)  # type: ignore[arg-type]

    node.backend.release = observing_release  # type: ignore[method-assign]
    await node.plugin.unprepare([kclaim(claim)])
    assert seen == [("release", False)]


@pytest.mark.parametrize(
    ("namespace", "uid", "name", "message"),
    [
        ("default", "", "c1", "must not be empty"),
        ("default", "not-a-uuid", "c1", "is not a UUID"),
        ("default", "../../etc/passwd", "c1", "is not a UUID"),
        ("", str(uuid.UUID(int=1)), "c1", "namespace"),
        ("default", str(uuid.UUID(int=2)), "Bad_Name", "must be a DNS subdomain"),
    ],
)
async def test_malformed_requests_are_invalid_argument_and_write_nothing(
    node: Node, namespace: str, uid: str, name: str, message: str
) -> None:
    good = node.claims.add(allocated_claim("good"))
    before = sorted(p.name for p in node.settings.plugin_dir.rglob("*"))
    for call in (node.plugin.prepare, node.plugin.unprepare):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call([kclaim(good), KubeletClaim(namespace, uid, name)])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (info.value.details() or "")
    assert sorted(p.name for p in node.settings.plugin_dir.rglob("*")) == before
    assert node.driver.engine.known_claims() == {}
    assert not list(node.settings.cdi_dir.glob("*"))
    assert node.backend.in_use() == {}


@pytest.mark.parametrize(
    ("claim_kwargs", "message"),
    [
        ({"driver": "other.example.com"}, "has no device allocated from driver gpu.example.com"),
        ({"pool": "node-b"}, "in pool node-a"),
        ({"reserved": False}, "is not reserved for any pod"),
    ],
)
async def test_claims_for_another_driver_or_node_are_not_prepared(
    node: Node, claim_kwargs: dict[str, object], message: str
) -> None:
    ours = node.claims.add(allocated_claim("ours", devices=[("gpu", "gpu-0")]))
    theirs = node.claims.add(allocated_claim("theirs", devices=[("gpu", "gpu-1")], **claim_kwargs))  # type: ignore[arg-type]
    result = await node.plugin.prepare([kclaim(ours), kclaim(theirs)])
    assert result.claims[ours["metadata"]["uid"]].error == ""
    assert message in result.claims[theirs["metadata"]["uid"]].error
    assert "theirs" in result.kubelet_error
    assert node.backend.in_use() == {"gpu-0": ours["metadata"]["uid"]}
    assert [p.name for p in node.settings.cdi_dir.glob("*.json")] == [
        f"gpu.example.com-claim_{ours['metadata']['uid']}.json"
    ]
    assert node.claims.finalizers("default", "theirs") == []


async def test_replaced_or_missing_claim_gets_a_per_claim_error(node: Node) -> None:
    node.claims.add(allocated_claim("c1"))
    replaced = KubeletClaim("default", str(uuid.uuid4()), "c1")
    missing = KubeletClaim("default", str(uuid.uuid4()), "nope")
    result = await node.plugin.prepare([replaced, missing])
    assert "was replaced" in result.claims[replaced.uid].error
    assert "not found" in result.claims[missing.uid].error
    assert node.backend.in_use() == {}
    assert node.driver.engine.known_claims() == {}


async def test_a_device_held_by_another_claim_is_refused_until_released(node: Node) -> None:
    first = node.claims.add(allocated_claim("first", devices=[("gpu", "gpu-0")]))
    second = node.claims.add(allocated_claim("second", devices=[("gpu", "gpu-0")]))
    assert (await node.plugin.prepare([kclaim(first)])).kubelet_error == ""
    refused = await node.plugin.prepare([kclaim(second)])
    error = refused.claims[second["metadata"]["uid"]].error
    assert f"still prepared for claim {first['metadata']['uid']}" in error
    assert node.backend.in_use() == {"gpu-0": first["metadata"]["uid"]}
    await node.plugin.unprepare([kclaim(first)])
    assert (await node.plugin.prepare([kclaim(second)])).kubelet_error == ""
    assert node.backend.in_use() == {"gpu-0": second["metadata"]["uid"]}


async def test_admin_access_does_not_take_the_device(node: Node) -> None:
    owner = node.claims.add(allocated_claim("owner", devices=[("gpu", "gpu-0")]))
    admin = node.claims.add(allocated_claim("admin", devices=[("gpu", "gpu-0")], admin_access=True))
    assert (await node.plugin.prepare([kclaim(owner)])).kubelet_error == ""
    assert (await node.plugin.prepare([kclaim(admin)])).kubelet_error == ""
    assert node.backend.in_use() == {"gpu-0": owner["metadata"]["uid"]}
