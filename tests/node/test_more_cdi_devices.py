"""A backend may give a device more than one CDI device (a control node beside it, say):
each gets its own fully qualified id, the kubelet gets them all, the spec defines them
all, and recovery rewrites them all."""

from __future__ import annotations

import json
from pathlib import Path

from dralet.cdi.spec import ContainerEdits, DeviceNode
from dralet.node.backend import AllocatedDevice, ClaimRef, PreparedDevice
from dralet.testing import MemoryClaims, MemoryDevices, allocated_claim, running_node
from dralet.testing.node import node_settings


class WithControlNode(MemoryDevices):
    """Each device comes with its control node, as a second CDI device."""

    async def prepare(self, claim: ClaimRef, device: AllocatedDevice) -> PreparedDevice:
        prepared = await super().prepare(claim, device)
        control = ContainerEdits(device_nodes=(DeviceNode(path=f"/dev/{device.device}-ctl"),))
        return PreparedDevice(edits=prepared.edits, state=prepared.state, more_edits=(control,))


async def test_every_cdi_device_of_a_device_reaches_the_kubelet_and_the_spec(
    tmp_path: Path,
) -> None:
    claims = MemoryClaims()
    claim = claims.add(allocated_claim("c1", devices=[("gpu", "gpu-0"), ("gpu", "gpu-1")]))
    uid = claim["metadata"]["uid"]
    settings = node_settings(tmp_path)
    async with running_node(settings, WithControlNode(2), claims=claims) as node:
        result = await node.prepare(claim)
        assert result.kubelet_error == ""
        ids = {d.device_name: d.cdi_device_ids for d in result.claims[uid].devices}
        kind = settings.cdi_kind
        assert ids == {
            "gpu-0": (f"{kind}={uid}-gpu-0", f"{kind}={uid}-gpu-0-1"),
            "gpu-1": (f"{kind}={uid}-gpu-1", f"{kind}={uid}-gpu-1-1"),
        }
        spec_path = next(settings.cdi_dir.glob(f"*{uid}.json"))
        spec = json.loads(spec_path.read_text())
        names = {d["name"]: d["containerEdits"] for d in spec["devices"]}
        assert sorted(names) == sorted(i.partition("=")[2] for v in ids.values() for i in v)
        assert names[f"{uid}-gpu-0-1"]["deviceNodes"] == [{"path": "/dev/gpu-0-ctl"}]

        # The same answer again, and after the spec is lost it is rewritten whole.
        assert (await node.prepare(claim)).claims == result.claims
        spec_path.unlink()
        again = await node.prepare(claim)
        assert again.claims == result.claims
        assert json.loads(spec_path.read_text()) == spec
        assert (await node.unprepare(claim)).kubelet_error == ""
        assert not spec_path.exists()
