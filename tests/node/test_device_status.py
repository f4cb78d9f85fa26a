"""The optional claim device status writer (``DriverSettings.write_device_status``): after a
prepare each of the driver's devices has its ``status.devices`` entry (the backend's
conditions, data and network data, or ``Ready``), other drivers' entries stay, the entries
go at unprepare before the finalizer does, and a failed or refused write never fails the
claim."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import dralet
from dralet.node.claims import devicestatus
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.node.quietbackend import QuietBackend

DRIVER = "gpu.example.com"
FINALIZER = f"{DRIVER}/prepared"
UID = "5d6f0e3a-1111-4a2b-8c3d-000000000010"
OTHER = {"driver": "net.example.com", "pool": "node-1", "device": "nic-0", "conditions": []}


class WithStatus(QuietBackend):
    """Two devices; ``status`` is what each prepared device reports."""

    def __init__(self, status: dralet.DeviceStatus | None = None) -> None:
        self.status = status

    def devices(self) -> list[dralet.Device]:
        return [dralet.Device(name="gpu-0"), dralet.Device(name="gpu-1")]

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> list[dralet.PreparedDevice]:
        return [
            dralet.PreparedDevice(edits=dralet.ContainerEdits(env=("A=1",)), status=self.status)
            for _ in allocation.devices
        ]

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        return None


def setup(tmp: Path, *, write: bool = True) -> tuple[dralet.DriverSettings, MemoryClaims, Any]:
    settings = dataclasses.replace(
        node_settings(tmp / "node", driver_name=DRIVER), write_device_status=write
    )
    claims = MemoryClaims()
    claim = claims.add(
        allocated_claim("c", uid=UID, driver=DRIVER, devices=[("r", "gpu-0"), ("r", "gpu-1")])
    )
    claim["status"]["devices"] = [dict(OTHER)]
    return settings, claims, claim


def status_devices(claims: MemoryClaims) -> list[dict[str, Any]]:
    return list(claims.objects[("default", "c")].get("status", {}).get("devices", []))


async def test_prepare_writes_a_ready_entry_per_device_and_unprepare_removes_them(
    short_tmp: Path,
) -> None:
    settings, claims, claim = setup(short_tmp)
    async with running_node(settings, WithStatus(), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        written = status_devices(claims)
        assert written[0] == OTHER
        mine = written[1:]
        assert [(d["driver"], d["device"]) for d in mine] == [
            (DRIVER, "gpu-0"),
            (DRIVER, "gpu-1"),
        ]
        (ready,) = mine[0]["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
        assert ready["lastTransitionTime"].endswith("Z")
        assert node.driver.metrics.device_status_writes.labels(result="ok")._value.get() == 1

        assert (await node.unprepare(claim)).kubelet_error == ""
    assert status_devices(claims) == [OTHER]
    calls = [c for c in claims.calls if c.startswith(("device-status", "remove-finalizer"))]
    assert calls == [
        "device-status default/c 2",
        "device-status default/c 0",
        "remove-finalizer default/c",
    ]


async def test_the_backends_conditions_data_and_network_data_are_written(short_tmp: Path) -> None:
    settings, claims, claim = setup(short_tmp)
    status = dralet.DeviceStatus(
        conditions=[
            {"type": "Ready", "status": "True", "reason": "Configured", "message": "mtu 9000"}
        ],
        data={"mtu": 9000},
        network=dralet.NetworkData(
            interface_name="net1", ips=("10.9.8.7/24",), hardware_address="aa:bb:cc:dd:ee:ff"
        ),
    )
    async with running_node(settings, WithStatus(status), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
    entry = status_devices(claims)[1]
    assert entry["conditions"][0]["reason"] == "Configured"
    assert entry["data"] == {"mtu": 9000}
    assert entry["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.9.8.7/24"],
        "hardwareAddress": "aa:bb:cc:dd:ee:ff",
    }


async def test_a_failed_status_write_does_not_fail_the_claim(short_tmp: Path) -> None:
    settings, claims, claim = setup(short_tmp)
    claims.fail_device_status = True
    async with running_node(settings, WithStatus(), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert node.driver.metrics.device_status_writes.labels(result="failed")._value.get() == 1
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert FINALIZER not in claims.finalizers("default", "c")


async def test_a_status_the_server_would_refuse_is_not_written(short_tmp: Path) -> None:
    settings, claims, claim = setup(short_tmp)
    status = dralet.DeviceStatus(data={"blob": "x" * (devicestatus.MAX_DATA_BYTES + 1)})
    async with running_node(settings, WithStatus(status), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert node.driver.metrics.device_status_writes.labels(result="refused")._value.get() == 1
    assert status_devices(claims) == [OTHER]


async def test_nothing_is_written_unless_asked(short_tmp: Path) -> None:
    settings, claims, claim = setup(short_tmp, write=False)
    async with running_node(settings, WithStatus(), claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert not [c for c in claims.calls if c.startswith("device-status")]


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        (dralet.DeviceStatus(conditions=[{"type": "Ready", "status": "True"}] * 9), "9 conditions"),
        (dralet.DeviceStatus(conditions=[{"type": "Ready", "status": "True"}]), "lacks reason"),
        (dralet.DeviceStatus(network=dralet.NetworkData(ips=("10.0.0.1",))), "CIDR"),
        (dralet.DeviceStatus(network=dralet.NetworkData(ips=("nonsense/8",))), "CIDR"),
        (dralet.DeviceStatus(network=dralet.NetworkData(ips=("10.0.0.1/8",) * 2)), "repeat"),
        (dralet.DeviceStatus(network=dralet.NetworkData(interface_name="n" * 257)), "256"),
        (dralet.DeviceStatus(network=dralet.NetworkData(hardware_address="a" * 129)), "128"),
    ],
)
def test_statuses_past_the_api_limits_are_refused_naming_the_device(
    status: dralet.DeviceStatus, problem: str
) -> None:
    from dralet.checkpoint.model import DeviceRecord

    device = dralet.AllocatedDevice(request="r", pool="node-1", device="gpu-3")
    record = DeviceRecord(device, request_names=("r",))
    result = dralet.PreparedDevice(edits=dralet.ContainerEdits(env=("A=1",)), status=status)
    with pytest.raises(devicestatus.DeviceStatusError, match=f"device gpu-3: .*{problem}"):
        devicestatus.entries(DRIVER, [record], [result])


def test_a_source_without_status_writes_is_refused_at_start(short_tmp: Path) -> None:
    from dralet.node.claims.engine import ClaimEngine

    class FinalizersOnly:
        async def get_claim(self, namespace: str, name: str) -> None:
            return None

    settings, _, _ = setup(short_tmp)
    with pytest.raises(ValueError, match="cannot write claim status"):
        ClaimEngine(settings, backend=WithStatus(), claims=FinalizersOnly())  # type: ignore[arg-type]
