"""The hostdev backend behind a running dralet node (in this process): CDI device
nodes, exclusivity from dralet's records, unplug while held, hot-plug publishing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import dralet
from dralet.drivers.hostdev import HostDevices, load_config
from dralet.testing import MemoryClaims, allocated_claim, node_settings, running_node
from tests.hostdev.fakehost import FakeHost

DRIVER = "hostdev.example.com"
UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"


def _groups(host: FakeHost, extra: str = "") -> str:
    return (
        f"  - name: dev\n    match: {{paths: ['{host.dev}/x*']}}\n    naming: [path]\n"
        "    containerPath: /dev/hostdev/{basename}\n    fileMode: 0o600\n    uid: 1000\n"
        "    permissions: rw\n    env: {HOSTDEV: '1'}\n"
        "    mounts: [{hostPath: /etc/hostname, containerPath: /etc/host-name}]\n" + extra
    )


def _backend(host: FakeHost, settings: dralet.DriverSettings, text: str) -> HostDevices:
    return HostDevices(load_config(host.config(text)))


def _claim(name: str, uid: str, *devices: str, configs: Any = None) -> dict[str, Any]:
    claim = allocated_claim(
        name, uid=uid, driver=DRIVER, devices=[(f"r{i}", d) for i, d in enumerate(devices)]
    )
    if configs is not None:
        claim["status"]["allocation"]["devices"]["config"] = configs
    return claim


def _spec_edits(cdi_dir: Path, uid: str) -> list[Mapping[str, Any]]:
    specs = [json.loads(p.read_text()) for p in cdi_dir.glob("*.json") if uid in p.name]
    return [d["containerEdits"] for spec in specs for d in spec["devices"]]


async def test_a_claim_gets_the_node_as_configured_and_nothing_is_left(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3), mode=0o666)
    settings = node_settings(short_root, driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0"))
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
        assert result.kubelet_error == "", result
        (edits,) = _spec_edits(settings.cdi_dir, UID_A)
        assert edits["deviceNodes"] == [
            {
                "path": "/dev/hostdev/x0",
                "hostPath": str(host.dev / "x0"),
                "type": "c",
                "major": 1,
                "minor": 3,
                "fileMode": 0o600,
                "permissions": "rw",
                "uid": 1000,
                "gid": os.stat(host.dev / "x0").st_gid,
            }
        ]
        assert edits["env"] == ["HOSTDEV=1"]
        assert edits["mounts"] == [
            {
                "hostPath": "/etc/hostname",
                "containerPath": "/etc/host-name",
                "options": ["bind", "ro"],
            }
        ]
        assert backend.devices_in_use() == {"dev-x0": UID_A}
        assert (await node.unprepare(claim)).kubelet_error == ""
        assert backend.devices_in_use() == {}
        assert _spec_edits(settings.cdi_dir, UID_A) == []
    assert oct(os.stat(host.dev / "x0").st_mode & 0o777) == oct(0o666), "the host node is untouched"


async def test_an_exclusive_device_is_refused_to_a_second_claim_until_released(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3))
    settings = node_settings(short_root, driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    claims = MemoryClaims()
    first = claims.add(_claim("a", UID_A, "dev-x0"))
    second = claims.add(_claim("b", UID_B, "dev-x0"))
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(first)).kubelet_error == ""
        refused = await node.prepare(second)
        assert f"is still prepared for claim {UID_A}" in refused.claims[UID_B].error
        assert _spec_edits(settings.cdi_dir, UID_B) == []
        assert (await node.unprepare(first)).kubelet_error == ""
        assert (await node.prepare(second)).kubelet_error == ""
        assert backend.devices_in_use() == {"dev-x0": UID_B}


async def test_a_device_unplugged_while_held_turns_unhealthy_and_its_claim_stays(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3))
    host.node("x1", (1, 5))
    settings = node_settings(short_root, driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0"))
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        host.unplug("x0")
        health = backend.health()
        assert health["dev-x0"].status is dralet.HealthStatus.UNHEALTHY
        assert UID_A in health["dev-x0"].message
        assert health["dev-x1"].status is dralet.HealthStatus.HEALTHY
        published = {d.name: d for d in backend.devices()}
        assert published["dev-x0"].attributes == {
            "type": "char",
            "major": 1,
            "minor": 3,
            "group": "dev",
        }
        assert backend.devices_in_use() == {"dev-x0": UID_A}, "never silently dropped"
        assert len(_spec_edits(settings.cdi_dir, UID_A)) == 1
        # A node at the same path with another number is not the device the claim had.
        host.node("x0", (1, 7))
        assert backend.health()["dev-x0"].status is dralet.HealthStatus.UNHEALTHY
        assert (await node.unprepare(claim)).kubelet_error == ""
    assert backend.devices_in_use() == {}
    assert sorted(d.name for d in backend.devices()) == ["dev-x0", "dev-x1"]


async def test_a_restarted_driver_learns_from_dralets_records_what_its_claims_hold(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3))
    host.node("x1", (1, 5))
    settings = node_settings(short_root, driver_name=DRIVER)
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0"))
    async with running_node(
        settings, _backend(host, settings, _groups(host)), claims=claims
    ) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
    host.unplug("x0")
    restarted = _backend(host, settings, _groups(host))
    assert restarted.devices_in_use() == {}, "nothing on the host says what is held"
    async with running_node(settings, restarted, claims=claims) as node:
        assert restarted.devices_in_use() == {"dev-x0": UID_A}
        assert restarted.health()["dev-x0"].status is dralet.HealthStatus.UNHEALTHY
        assert "dev-x0" in {d.name for d in restarted.devices()}, "still published while held"
        assert (await node.unprepare(claim)).kubelet_error == ""
        assert restarted.devices_in_use() == {}
        assert [d.name for d in restarted.devices()] == ["dev-x1"]


def test_after_a_reboot_a_device_is_still_prepared_only_if_its_node_is_the_same(
    host: FakeHost, tmp_path: Path
) -> None:
    host.node("x0", (1, 3))
    settings = node_settings(tmp_path / "node", driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    allocated = dralet.AllocatedDevice(request="r0", pool="node-a", device="dev-x0")
    claim = dralet.ClaimAllocation(
        claim=dralet.ClaimRef(dralet.ClaimUID(UID_A), "default", "a"), devices=(allocated,)
    )
    (prepared,) = backend.prepare_claim(claim)
    assert backend.survives_reboot(allocated, prepared.state)
    host.unplug("x0")
    host.node("x0", (1, 5))  # the kernel gave the path to another device this boot
    assert not backend.survives_reboot(allocated, prepared.state)


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (
            [
                {
                    "source": "FromClass",
                    "requests": [],
                    "opaque": {
                        "driver": DRIVER,
                        "parameters": {"env": {"A": "class", "B": "class"}},
                    },
                },
                {
                    "source": "FromClaim",
                    "requests": [],
                    "opaque": {"driver": DRIVER, "parameters": {"env": {"A": "claim"}}},
                },
            ],
            ["HOSTDEV=1", "A=claim", "B=class"],
        ),
        (
            [
                {
                    "source": "FromClaim",
                    "requests": [],
                    "opaque": {"driver": DRIVER, "parameters": {"colour": "red"}},
                }
            ],
            "unknown parameter(s) colour (hostdev takes: env)",
        ),
    ],
)
async def test_opaque_env_config_in_precedence_and_unknown_keys_refused(
    host: FakeHost, short_root: Path, configs: Any, expected: Any
) -> None:
    host.node("x0", (1, 3))
    settings = node_settings(short_root, driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0", configs=configs))
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
        edits = _spec_edits(settings.cdi_dir, UID_A)
    if isinstance(expected, list):
        assert result.kubelet_error == "", result
        assert [e["env"] for e in edits] == [expected]
    else:
        assert expected in result.claims[UID_A].error
        assert edits == []
        assert backend.devices_in_use() == {}


async def test_a_fixed_container_path_numbers_the_devices_after_the_first(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3))
    host.node("x1", (1, 5))
    settings = node_settings(short_root, driver_name=DRIVER)
    text = (
        f"  - name: dev\n    match: {{paths: ['{host.dev}/x*']}}\n    naming: [path]\n"
        "    containerPath: /dev/one\n"
        f"  - name: idx\n    match: {{paths: ['{host.dev}/y*']}}\n    naming: [path]\n"
        "    containerPath: /dev/slot{index}\n"
    )
    host.node("y0", (1, 7))
    host.node("y1", (1, 8))
    backend = _backend(host, settings, text)
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0", "dev-x1", "idx-y1", "idx-y0"))
    async with running_node(settings, backend, claims=claims) as node:
        assert (await node.prepare(claim)).kubelet_error == ""
        paths = {
            n["hostPath"].rsplit("/", 1)[1]: n["path"]
            for e in _spec_edits(settings.cdi_dir, UID_A)
            for n in e["deviceNodes"]
        }
    assert paths == {"x0": "/dev/one", "x1": "/dev/one-1", "y1": "/dev/slot0", "y0": "/dev/slot1"}


async def test_two_devices_at_one_container_path_are_refused(
    host: FakeHost, short_root: Path
) -> None:
    host.node("x0", (1, 3))
    host.node("x1", (1, 5))
    settings = node_settings(short_root, driver_name=DRIVER)
    text = (
        f"  - name: dev\n    match: {{paths: ['{host.dev}/x0']}}\n    naming: [path]\n"
        "    containerPath: /dev/one\n"
        f"  - name: other\n    match: {{paths: ['{host.dev}/x1']}}\n    naming: [path]\n"
        "    containerPath: /dev/one\n"
    )
    backend = _backend(host, settings, text)
    claims = MemoryClaims()
    claim = claims.add(_claim("a", UID_A, "dev-x0", "other-x1"))
    async with running_node(settings, backend, claims=claims) as node:
        result = await node.prepare(claim)
    assert "devices dev-x0 and other-x1 would both be /dev/one in the container" in (
        result.claims[UID_A].error
    )
    assert backend.devices_in_use() == {}


async def test_a_plugged_device_is_published_at_once_by_inotify(
    host: FakeHost, tmp_path: Path
) -> None:
    settings = node_settings(tmp_path / "node", driver_name=DRIVER)
    backend = _backend(host, settings, _groups(host))
    published = asyncio.Event()

    def publish() -> bool:
        published.set()
        return True

    backend.use_publish(publish)
    try:
        await asyncio.sleep(0)  # the watch task takes its first look
        await asyncio.sleep(0.1)
        assert not published.is_set()
        host.node("x0", (1, 3))
        # rescanSeconds is 30: only the inotify event can publish within the wait.
        await asyncio.wait_for(published.wait(), 10)
        published.clear()
        host.unplug("x0")
        await asyncio.wait_for(published.wait(), 10)
    finally:
        await backend.aclose()
    assert [d.name for d in backend.devices()] == []
