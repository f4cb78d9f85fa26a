"""Hostile and broken requests on the DRA socket: refused cleanly, never a crash, never a
file outside the configured directories."""

from __future__ import annotations

import uuid

import grpc
import pytest

from dralet.kubelet import KubeletClaim
from dralet.protocol import wire
from dralet.protocol.proto import dra_v1_pb2
from tests.hostile.conftest import (
    add_claim,
    allowed_dirs,
    assert_written_only_inside,
    files_under,
)
from tests.node.conftest import Node

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
UNPREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
MANY_CLAIMS = 10_000
KUBELET_DEADLINE = 45.0

HOSTILE_UIDS = [
    "../../../../etc/passwd",
    "../" * 12,
    "a/b",
    "/",
    "0b8f3a52-6f8e-4a59-9d2c-3c1f4d0e7a1\x00",
    "\x00" * 36,
    "x" * 10_240,
    "0b8f3a52-6f8e-4a59-9d2c-3c1f4d0e7a1/",
    "",
]


async def _raw_call(node: Node, method: str, payload: bytes) -> grpc.aio.AioRpcError:
    # No serializers: the bytes go on the wire as they are.
    call = node.plugin.channel().unary_unary(
        method, request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call(payload, timeout=10)
    return failure.value


async def _still_serves(node: Node) -> None:
    claim = add_claim(node, f"after-{uuid.uuid4().hex[:8]}", "gpu-3")
    assert (await node.plugin.prepare([claim])).kubelet_error == ""
    assert (await node.plugin.unprepare([claim])).kubelet_error == ""


@pytest.mark.parametrize("uid", HOSTILE_UIDS, ids=lambda u: repr(u[:24]))
@pytest.mark.parametrize("operation", ["prepare", "unprepare"])
async def test_hostile_claim_uid_is_refused_and_touches_nothing(
    node: Node, uid: str, operation: str
) -> None:
    before = files_under(node.settings.plugin_dir.parents[2])
    claim = KubeletClaim("default", uid, "c")
    send = node.plugin.prepare if operation == "prepare" else node.plugin.unprepare
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await send([claim])
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "uid" in (failure.value.details() or "")
    assert files_under(node.settings.plugin_dir.parents[2]) == before
    await _still_serves(node)
    assert_written_only_inside(node.settings.plugin_dir.parents[2], allowed_dirs(node))


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("../x", "c"), ("default", "../../c"), ("default", "a/b"), ("default", "n" * 10_000)],
)
async def test_hostile_namespace_or_name_is_refused(node: Node, namespace: str, name: str) -> None:
    claim = KubeletClaim(namespace, str(uuid.uuid4()), name)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await node.plugin.prepare([claim])
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await _still_serves(node)


async def test_duplicate_claims_in_one_request_get_one_answer(node: Node) -> None:
    claim = add_claim(node, "c", "gpu-0")
    result = await node.plugin.prepare([claim, claim, claim])
    assert result.kubelet_error == ""
    assert list(result.claims) == [claim.uid]
    assert node.backend.in_use() == {"gpu-0": claim.uid}
    upper = KubeletClaim(claim.namespace, claim.uid.upper(), claim.name)
    assert (await node.plugin.unprepare([claim, upper])).claims.keys() <= {claim.uid, upper.uid}
    assert node.backend.in_use() == {}


async def test_same_uid_with_two_names_is_refused(node: Node) -> None:
    claim = add_claim(node, "c", "gpu-0")
    twin = KubeletClaim(claim.namespace, claim.uid, "other")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await node.plugin.prepare([claim, twin])
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert node.backend.in_use() == {}


async def test_ten_thousand_claims_in_one_request_are_all_answered(node: Node) -> None:
    known = add_claim(node, "known", "gpu-1")
    claims = [known] + [
        KubeletClaim("default", str(uuid.uuid4()), f"c{i}") for i in range(MANY_CLAIMS - 1)
    ]
    node.plugin.call_timeout = KUBELET_DEADLINE

    prepared = await node.plugin.prepare(claims)

    assert len(prepared.claims) == MANY_CLAIMS
    assert prepared.claims[known.uid].error == ""
    assert all("not found" in prepared.claims[c.uid].error for c in claims[1:])
    unprepared = await node.plugin.unprepare(claims)
    assert len(unprepared.claims) == MANY_CLAIMS
    assert unprepared.kubelet_error == ""
    assert node.backend.in_use() == {}
    # Claims are locked as bytes of one file: no file per claim is left behind.
    assert sorted(p.name for p in node.settings.plugin_dir.glob("*.lock")) == ["claims.lock"]


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xff\xff\xff",
        b"\x0a\xff\x01",
        b"\x0a\x05\x0a\x03abc",  # decodes: a claim with only a namespace, refused
        b"\x0a" + b"\x80" * 10 + b"\x01",
    ],
    ids=["garbage", "bad-length", "truncated-nested", "overlong-varint"],
)
@pytest.mark.parametrize("method", [PREPARE, UNPREPARE])
async def test_malformed_protobuf_is_refused_without_a_crash(
    node: Node, method: str, payload: bytes
) -> None:
    failure = await _raw_call(node, method, payload)
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT, failure.details()
    if payload != b"\x0a\x05\x0a\x03abc":
        assert "malformed k8s.io.kubelet.pkg.apis.dra.v1" in (failure.details() or "")
    await _still_serves(node)


@pytest.mark.parametrize(
    "method",
    [
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
    ],
)
async def test_malformed_protobuf_is_invalid_argument_on_every_service(
    node: Node, method: str
) -> None:
    if "Health" in method:
        call = node.plugin.channel().unary_stream(
            method, request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            async for _ in call(b"\xff\xff\xff", timeout=10):
                pass
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    else:
        assert (await _raw_call(node, method, b"\xff\xff")).code() == (
            grpc.StatusCode.INVALID_ARGUMENT
        )
    await _still_serves(node)


async def test_a_request_over_the_size_limit_is_refused_naming_the_limit(node: Node) -> None:
    claim = dra_v1_pb2.Claim(namespace="default", uid=str(uuid.uuid4()), name="n" * 200)
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[claim] * (wire.MAX_RECEIVE_BYTES // claim.ByteSize() + 1)
    ).SerializeToString()
    assert len(request) > wire.MAX_RECEIVE_BYTES
    failure = await _raw_call(node, PREPARE, request)
    assert failure.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(wire.MAX_RECEIVE_BYTES) in (failure.details() or "")
    await _still_serves(node)


async def test_an_upper_case_uid_is_answered_under_its_own_key_with_an_error(node: Node) -> None:
    claim = add_claim(node, "c", "gpu-0")
    upper = KubeletClaim(claim.namespace, claim.uid.upper(), claim.name)

    prepared = await node.plugin.prepare([upper])

    assert list(prepared.claims) == [upper.uid]  # the key the kubelet sent, not re-keyed
    assert "canonical" in prepared.claims[upper.uid].error
    assert node.backend.in_use() == {}
    unprepared = await node.plugin.unprepare([upper])
    assert list(unprepared.claims) == [upper.uid]
    assert "canonical" in unprepared.claims[upper.uid]


async def test_valid_protobuf_with_unknown_fields_is_served(node: Node) -> None:
    claim = add_claim(node, "c", "gpu-2")
    request = (
        dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace=claim.namespace, uid=claim.uid, name=claim.name)]
        ).SerializeToString()
        + b"\xf8\x3f\x01"
    )  # field 1023, varint: from a newer kubelet
    call = node.plugin.channel().unary_unary(
        PREPARE,
        request_serializer=None,
        response_deserializer=dra_v1_pb2.NodePrepareResourcesResponse.FromString,
    )
    response = await call(request, timeout=10)
    assert response.claims[claim.uid].error == ""


@pytest.mark.parametrize(
    "method",
    [
        "/k8s.io.kubelet.pkg.apis.dra.v2.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1alpha3.Node/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeSomethingNew",
    ],
)
async def test_unknown_service_version_is_unimplemented(node: Node, method: str) -> None:
    failure = await _raw_call(node, method, b"")
    assert failure.code() == grpc.StatusCode.UNIMPLEMENTED
    await _still_serves(node)
