"""A backend may also name CDI devices another spec on the node defines (the NVIDIA
Container Toolkit's, say): the kubelet gets them after the device's own, the record keeps
them, dralet's spec neither defines nor removes them, and an id that is not a valid
qualified name, or has the driver's own kind, fails only its claim."""

from __future__ import annotations

from pathlib import Path

from dralet.checkpoint import database
from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from dralet.testing import MemoryClaims, MemoryDevices, allocated_claim, running_node
from dralet.testing.node import node_settings


class WithToolkitIds(MemoryDevices):
    """Each device also gets ``external`` formatted with its name."""

    def __init__(self, count: int, external: str) -> None:
        super().__init__(count)
        self.external = external

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        prepared = await super().prepare(claim, device)
        return PreparedDevice(
            edits=prepared.edits,
            state=prepared.state,
            external_cdi_ids=(self.external.format(device=device.device),),
        )


async def test_external_ids_reach_the_kubelet_after_the_devices_own(tmp_path: Path) -> None:
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    settings = node_settings(tmp_path)
    backend = WithToolkitIds(2, "nvidia.com/gpu=GPU-{device}")
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
        assert result.kubelet_error == ""
        (device,) = result.claims[uid].devices
        assert device.cdi_device_ids == (
            f"{settings.cdi_kind}={uid}-gpu-0",
            "nvidia.com/gpu=GPU-gpu-0",
        )
        records = database.read_only_snapshot(settings.store_path, settings.checkpoint_path)
        (recorded,) = records.checkpoint.claims[uid].devices
        assert recorded.external_cdi_ids == ("nvidia.com/gpu=GPU-gpu-0",)
        assert (await node.prepare(claim)).claims == result.claims
        assert (await node.unprepare(claim)).kubelet_error == ""


async def test_a_bad_external_id_fails_its_claim_and_holds_nothing(tmp_path: Path) -> None:
    settings = node_settings(tmp_path)
    for external, problem in (
        ("gpu-{device}", "external CDI id 'gpu-gpu-0'"),
        (settings.cdi_kind + "=x-{device}", "has the driver's own kind"),
    ):
        claims = MemoryClaims()
        claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0")]))
        uid = claim["metadata"]["uid"]
        backend = WithToolkitIds(1, external)
        async with running_node(settings, backend, claims=claims) as node:
            result = await node.prepare(claim)
            assert problem in result.claims[uid].error
            assert await backend.devices_in_use() == {}
            assert not list(settings.cdi_dir.glob(f"*{uid}*"))
