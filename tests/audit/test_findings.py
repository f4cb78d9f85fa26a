"""Each kind of inconsistency, planted on a real node's files, in the backend's state or
in the API stand-in, is found with its exact kind; ``--fix`` repairs what it says it
repairs (a second audit is clean) and leaves what needs a person."""

from __future__ import annotations

import json
import uuid

from dralet.cdi import spec as cdi_spec
from dralet.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from dralet.node.backend import AllocatedDevice, ClaimRef, ClaimUID
from tests import claimstore
from tests.audit.conftest import FINALIZER, NODE, AuditedNode


async def _fixed(node: AuditedNode) -> list[tuple[str, str]]:
    """Run --fix; assert the audit after it is clean; the repair actions."""
    result = await node.audit(fix=True)
    assert result.fix_applied
    assert result.remaining == (), result.remaining
    assert result.consistent
    assert await node.kinds() == []
    return list(result.actions)


def _spec_document(node: AuditedNode, uid: str, device: str) -> dict[str, object]:
    return cdi_spec.to_json(
        cdi_spec.Spec(
            kind=node.settings.cdi_kind,
            devices=(
                cdi_spec.CDIDevice(
                    name=f"{uid}-{device}",
                    container_edits=cdi_spec.ContainerEdits(env=("PLANTED=1",)),
                ),
            ),
        )
    )


async def test_a_consistent_node_has_no_findings(node: AuditedNode) -> None:
    await node.prepare("train", "gpu-0", "gpu-1")
    result = await node.audit()
    assert result.findings == ()
    assert result.consistent
    assert result.snapshot.in_use is not None and len(result.snapshot.in_use) == 2


async def test_orphan_spec(node: AuditedNode) -> None:
    uid = str(uuid.uuid4())
    node.engine.specs.write(uid, _spec_document(node, uid, "gpu-3"))
    assert await node.kinds() == ["orphan-spec"]
    assert ("orphan-spec-removed", uid) in await _fixed(node)
    assert not node.engine.specs.exists(uid)


async def test_orphan_metadata(node: AuditedNode) -> None:
    uid = str(uuid.uuid4())
    files = node.engine.metadata_files
    files.root.parent.mkdir(parents=True, exist_ok=True)
    files.write(uid, {"gpu": "{}\n"})
    assert await node.kinds() == ["orphan-metadata"]
    assert ("orphan-metadata-removed", uid) in await _fixed(node)
    assert files.claim_uids() == []


async def test_orphan_spec_and_metadata_go_together(node: AuditedNode) -> None:
    uid = str(uuid.uuid4())
    node.engine.specs.write(uid, _spec_document(node, uid, "gpu-3"))
    files = node.engine.metadata_files
    files.root.parent.mkdir(parents=True, exist_ok=True)
    files.write(uid, {"gpu": "{}\n"})
    assert await node.kinds() == ["orphan-spec"]
    assert ("orphan-spec-removed", uid) in await _fixed(node)
    assert not node.engine.specs.exists(uid)
    assert files.claim_uids() == []


async def test_unreadable_orphan_spec_is_invalid_and_orphaned(node: AuditedNode) -> None:
    uid = str(uuid.uuid4())
    node.engine.specs.ensure_dir()
    node.engine.specs.path_for(uid).write_text("{not json")
    findings = (await node.audit()).findings
    assert [(f.kind, f.subject) for f in findings] == [("invalid-spec", uid), ("orphan-spec", uid)]
    assert "unreadable" in findings[0].message
    await _fixed(node)


async def test_invalid_spec_content_of_a_prepared_claim(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    path = node.engine.specs.path_for(ref.uid)
    document = json.loads(path.read_text())
    document["devices"][0]["name"] = "not a valid name!"
    path.write_text(json.dumps(document))
    findings = (await node.audit()).findings
    assert [(f.kind, f.subject) for f in findings] == [("invalid-spec", ref.uid)]
    assert findings[0].repair == "rewrite the spec from the checkpoint"
    assert ("spec-rewritten", ref.uid) in await _fixed(node)
    assert json.loads(path.read_text())["devices"][0]["name"] == f"{ref.uid}-gpu-0"


async def test_spec_that_does_not_define_the_claims_cdi_device(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.engine.specs.write(ref.uid, _spec_document(node, ref.uid, "gpu-3"))
    findings = (await node.audit()).findings
    assert [f.kind for f in findings] == ["invalid-spec"]
    assert f"{node.settings.cdi_kind}={ref.uid}-gpu-0" in findings[0].message
    await _fixed(node)


async def test_spec_of_another_kind(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    path = node.engine.specs.path_for(ref.uid)
    document = json.loads(path.read_text())
    document["kind"] = "other.example.com/claim"
    path.write_text(json.dumps(document))
    assert await node.kinds() == ["invalid-spec"]
    await _fixed(node)


async def test_missing_spec(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.engine.specs.remove(ref.uid)
    assert await node.kinds() == ["missing-spec"]
    assert ("spec-rewritten", ref.uid) in await _fixed(node)
    assert node.engine.specs.exists(ref.uid)


async def test_half_prepared_claim_is_rolled_back(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_state(ref.uid, ClaimState.PREPARE_STARTED)
    assert await node.kinds() == ["half-prepared"]
    assert ("prepare-rolled-back", ref.uid) in await _fixed(node)
    assert node.backend.in_use() == {}
    assert node.cluster.finalizers(ref) == []


async def test_half_unprepared_claim_is_finished(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_state(ref.uid, ClaimState.UNPREPARE_STARTED)
    assert await node.kinds() == ["half-unprepared"]
    assert ("unprepare-finished", ref.uid) in await _fixed(node)
    assert node.backend.in_use() == {}
    assert not node.engine.specs.exists(ref.uid)


async def test_released_claim_with_a_pending_finalizer(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    record = node.records()[ref.uid]
    node.engine.specs.remove(ref.uid)
    await node.backend.release(
        ClaimRef(ClaimUID(ref.uid), ref.namespace, ref.name),
        AllocatedDevice(request="gpu", pool=NODE, device="gpu-0"),
        {},
    )
    node.set_state(record.uid, ClaimState.RELEASED)
    assert await node.kinds() == ["finalizer-pending"]
    (finding,) = (await node.audit()).findings
    assert "finalizer removal owed" in finding.message
    assert ("finalizer-retried", ref.uid) in await _fixed(node)
    assert node.cluster.finalizers(ref) == []


async def test_device_held_twice_needs_a_person(node: AuditedNode) -> None:
    first = await node.prepare("train", "gpu-0")
    twin_ref = node.cluster.allocate_claim("twin", [("gpu", "gpu-0")])
    node.set_finalizers(twin_ref, [FINALIZER])
    twin = ClaimRecord(
        uid=twin_ref.uid,
        namespace="default",
        name="twin",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(DeviceRecord(AllocatedDevice(request="gpu", pool=NODE, device="gpu-0")),),
        finalizer_added=True,
    )
    node.put_record(twin)
    findings = (await node.audit(backend=False, api=False)).findings
    assert [(f.kind, f.subject) for f in findings] == [
        ("missing-spec", twin.uid),
        ("device-held-twice", f"{NODE}/gpu-0"),
    ]
    held = findings[1]
    assert first.uid in held.message and twin.uid in held.message and held.repair == ""
    assert await node.kinds() == ["missing-spec", "device-held-twice", "device-not-held"]
    result = await node.audit(fix=True)
    assert [f.kind for f in result.remaining] == [
        "missing-spec",
        "device-held-twice",
        "device-not-held",
    ]
    assert not result.consistent


async def test_orphan_backend_device_is_released(node: AuditedNode) -> None:
    stranger = ClaimRef(ClaimUID(str(uuid.uuid4())), "default", "gone")
    await node.backend.prepare(stranger, AllocatedDevice(request="gpu", pool=NODE, device="gpu-2"))
    assert [(f.kind, f.subject) for f in (await node.audit()).findings] == [
        ("orphan-device", "gpu-2")
    ]
    assert ("orphan-device-released", f"gpu-2 (claim {stranger.uid})") in await _fixed(node)
    assert node.backend.in_use() == {}


async def test_backend_not_holding_a_prepared_device_needs_a_person(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-1")
    await node.backend.release(
        ClaimRef(ClaimUID(ref.uid), ref.namespace, ref.name),
        AllocatedDevice(request="gpu", pool=NODE, device="gpu-1"),
        {},
    )
    findings = (await node.audit()).findings
    assert [(f.kind, f.subject, f.repair) for f in findings] == [("device-not-held", "gpu-1", "")]
    assert await node.kinds(backend=False) == []


async def test_claim_gone_from_the_api_is_unprepared(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_finalizers(ref, [])
    node.cluster.delete_claim(ref)
    assert [(f.kind, f.subject) for f in (await node.audit()).findings] == [("claim-gone", ref.uid)]
    assert await node.kinds(api=False) == []
    assert ("stale-claim-unprepared", ref.uid) in await _fixed(node)
    assert node.backend.in_use() == {}
    assert node.records() == {}


async def test_claim_replaced_by_one_with_a_new_uid(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_finalizers(ref, [])
    node.cluster.delete_claim(ref)
    new = node.cluster.allocate_claim("train", [("gpu", "gpu-0")])
    findings = (await node.audit()).findings
    assert [(f.kind, f.subject) for f in findings] == [("claim-replaced", ref.uid)]
    assert new.uid in findings[0].message
    await _fixed(node)
    assert node.backend.in_use() == {}


async def test_claim_moved_to_another_node(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    claim = node.cluster.claim(ref)
    assert claim is not None
    allocation = claim["status"]["allocation"]
    for result in allocation["devices"]["results"]:
        result["pool"] = "node-b"
    node.api.patch(
        "ResourceClaim",
        ref.name,
        {"status": {"allocation": allocation}},
        namespace=ref.namespace,
        subresource="status",
    )
    assert await node.kinds() == ["claim-moved"]
    await _fixed(node)
    assert node.backend.in_use() == {}


async def test_prepared_claim_without_our_finalizer(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_finalizers(ref, [])
    assert await node.kinds() == ["prepared-without-finalizer"]
    assert ("finalizer-restored", ref.uid) in await _fixed(node)
    assert node.cluster.finalizers(ref) == [FINALIZER]


async def test_finalizer_on_a_claim_not_prepared_here(node: AuditedNode) -> None:
    ref = node.cluster.allocate_claim("elsewhere", [("gpu", "gpu-3")])
    node.set_finalizers(ref, [FINALIZER, "someone.else/keep"])
    findings = (await node.audit()).findings
    assert [(f.kind, f.subject, f.namespace, f.name) for f in findings] == [
        ("finalizer-without-claim", ref.uid, "default", "elsewhere")
    ]
    assert ("foreign-finalizer-removed", ref.uid) in await _fixed(node)
    assert node.cluster.finalizers(ref) == ["someone.else/keep"]


async def test_corrupt_checkpoint_with_nothing_prepared_is_reset(node: AuditedNode) -> None:
    claimstore.damage_store(node.settings.store_path)
    findings = (await node.audit()).findings
    assert [f.kind for f in findings] == ["corrupt-checkpoint"]
    assert findings[0].repair.startswith("reset the checkpoint")
    actions = await _fixed(node)
    assert [a for a, _ in actions] == ["corrupt-checkpoint-reset"]
    assert list(node.settings.plugin_dir.glob("claims.db.corrupt-*"))


async def test_corrupt_checkpoint_with_prepared_claims_fails_closed(node: AuditedNode) -> None:
    await node.prepare("train", "gpu-0")
    claimstore.damage_store(node.settings.store_path, b"garbage")
    findings = (await node.audit()).findings
    assert [(f.kind, f.repair) for f in findings] == [("corrupt-checkpoint", "")]
    assert "fails closed" in findings[0].message
    result = await node.audit(fix=True)
    assert result.fail_closed
    assert [f.kind for f in result.remaining] == ["corrupt-checkpoint"]
    assert node.settings.store_path.read_bytes() == b"garbage"


async def test_without_backend_and_api_only_node_files_are_audited(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.set_finalizers(ref, [])
    stranger = ClaimRef(ClaimUID(str(uuid.uuid4())), "default", "gone")
    await node.backend.prepare(stranger, AllocatedDevice(request="gpu", pool=NODE, device="gpu-2"))
    result = await node.audit(backend=False, api=False)
    assert result.findings == ()
    assert result.snapshot.in_use is None and result.snapshot.claims is None
    assert sorted(await node.kinds()) == ["orphan-device", "prepared-without-finalizer"]


async def test_claim_deleted_with_no_pod_left_is_unprepared(node: AuditedNode) -> None:
    ref = await node.prepare("train", "gpu-0")
    node.api.patch(
        "ResourceClaim", ref.name, {"status": {"reservedFor": None}},
        namespace=ref.namespace, subresource="status",
    )  # fmt: skip
    assert await node.kinds() == []  # unreserved but not deleted: still the kubelet's call
    node.cluster.delete_claim(ref)  # held by the driver's finalizer
    assert await node.kinds() == ["claim-deleted-unused"]
    await _fixed(node)
    assert node.backend.in_use() == {}
    assert node.cluster.claim(ref) is None  # finalizer removed, so the deletion completed
