"""The public test kit, used the way a driver author's own tests use it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from dralet import testing
from dralet.testing import MemoryClaims, StrictBackend, allocated_claim, node_settings


async def test_a_strict_backend_runs_as_a_node_and_is_called_by_the_kubelet(
    short_tmp: Path,
) -> None:
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", devices=[("gpu", "dev-1")]))
    backend = StrictBackend(state_dir=short_tmp / "strict")
    settings = node_settings(short_tmp / "n")

    async with testing.running_node(settings, backend, claims=claims) as node:
        prepared = await node.prepare(claim)
        again = await node.prepare(claim)
        assert prepared.kubelet_error == ""
        uid = claim["metadata"]["uid"]
        assert prepared.cdi_ids(uid) and prepared.cdi_ids(uid) == again.cdi_ids(uid)
        assert claims.finalizers("default", "c1") == [f"{settings.driver_name}/prepared"]

        released = await node.unprepare(claim)
        assert released.kubelet_error == ""
        await node.settled()
        assert claims.finalizers("default", "c1") == []

    backend.assert_clean()


async def test_memory_claims_keep_a_deleted_claim_until_its_finalizer_goes() -> None:
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1"))
    namespace, uid, name = claims.ref(claim)
    assert await claims.add_finalizer(namespace, name, uid, "gpu.example.com/prepared")

    claims.delete(namespace, name)
    assert (await claims.get_claim(namespace, name) or {})["metadata"]["deletionTimestamp"]
    assert not await claims.add_finalizer(namespace, name, "another-uid", "x/y")

    assert await claims.remove_finalizer(namespace, name, uid, "gpu.example.com/prepared")
    assert await claims.get_claim(namespace, name) is None


def test_the_strict_backend_is_importable_from_the_kit() -> None:
    from dralet.testing.strict import StrictBackend as Strict

    assert testing.StrictBackend is Strict


@pytest.mark.parametrize("name", testing.__all__)
def test_every_public_name_of_the_kit_is_documented(name: str) -> None:
    assert inspect.getdoc(getattr(testing, name)), f"dralet.testing.{name} has no docstring"


async def test_memory_claims_list_what_the_api_would_and_name_a_claim_as_the_engine_does() -> None:
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", namespace="ns", uid="uid-1"))
    claims.add(allocated_claim("c2"))

    listed = await claims.list_claims()
    assert sorted(c["metadata"]["name"] for c in listed) == ["c1", "c2"]
    listed[0]["metadata"]["finalizers"].append("x/y")  # a copy, as the API hands out
    assert claims.finalizers("ns", "c1") == claims.finalizers("default", "c2") == []

    ref = testing.claim_ref(claim)
    assert (ref.uid, ref.namespace, ref.name) == ("uid-1", "ns", "c1")


async def test_the_audit_finds_nothing_after_a_round_trip_and_names_what_a_test_broke(
    short_tmp: Path,
) -> None:
    claims = MemoryClaims()
    kept = claims.add(allocated_claim("kept", devices=[("gpu", "gpu-0")]))
    released = claims.add(allocated_claim("released", devices=[("gpu", "gpu-1")]))
    backend = testing.MemoryDevices(2)
    settings = node_settings(short_tmp / "n")

    async with testing.running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(kept, released)).kubelet_error == ""
        assert (await node.unprepare(released)).kubelet_error == ""
        await node.settled()
        assert await testing.audit_findings(settings, backend, claims=claims) == []

        del backend.held["gpu-0"]  # the backend forgets a device a prepared claim holds
        findings = await testing.audit_findings(settings, backend, claims=claims)
        assert [(f.kind, f.subject) for f in findings] == [("device-not-held", "gpu-0")]
