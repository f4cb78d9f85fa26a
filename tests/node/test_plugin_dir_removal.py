"""A driver stopping cleanly removes its plugin dir (``remove_plugin_dir_when_unused``,
what the chart sets) only when a later start needs nothing of it: no claim record, no
other instance running in it, no unusable store kept there; otherwise it stays as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import os
import tempfile
from pathlib import Path

from dralet.checkpoint import database
from dralet.drivers.example import SimulatedGPUs
from dralet.node import directories
from dralet.node.runner import NodeServer
from dralet.testing.claims import NODE, MemoryClaims, allocated_claim
from tests.node.conftest import make_settings, running_node
from tests.node.test_prepare import kclaim


async def test_a_driver_holding_no_claim_removes_its_plugin_dir_only(tmp_path: Path) -> None:
    async with running_node(tmp_path, remove_plugin_dir_when_unused=True) as node:
        plugin_dir = node.settings.plugin_dir
        claim = node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-1")]))
        assert (await node.plugin.prepare([kclaim(claim)])).kubelet_error == ""
        assert (await node.plugin.unprepare([kclaim(claim)])).kubelet_error == ""
        await node.driver.engine.settled()
        assert (plugin_dir / "claims.db").exists()
    assert not plugin_dir.exists()
    assert plugin_dir.parent.is_dir()
    assert node.settings.registry_dir.is_dir() and node.settings.cdi_dir.is_dir()


async def test_a_prepared_claim_keeps_the_plugin_dir_for_the_next_start(tmp_path: Path) -> None:
    async with running_node(tmp_path, remove_plugin_dir_when_unused=True) as node:
        claim = node.claims.add(allocated_claim("c1", devices=[("gpu", "gpu-1")]))
        assert (await node.plugin.prepare([kclaim(claim)])).kubelet_error == ""
    uid = claim["metadata"]["uid"]
    kept = database.read_only_snapshot(node.settings.store_path).checkpoint.claims
    assert list(kept) == [uid]
    async with running_node(
        tmp_path, claims=node.claims, remove_plugin_dir_when_unused=True
    ) as again:
        assert again.driver.recovery is not None
        assert (await again.plugin.prepare([kclaim(claim)])).claims[uid].error == ""
    assert node.settings.plugin_dir.is_dir()


async def test_the_default_keeps_the_plugin_dir(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        pass
    assert node.settings.plugin_dir.is_dir()


async def test_another_instance_in_the_plugin_dir_keeps_it_until_it_leaves() -> None:
    """As in a rolling update: the old instance stops while the new one serves."""
    # Short: per-instance socket names must fit a unix socket address.
    with tempfile.TemporaryDirectory(prefix="dralet-") as made:
        await _two_instances(Path(made))


async def _two_instances(root: Path) -> None:
    async with running_node(root, remove_plugin_dir_when_unused=True, pod_uid="old") as old:
        settings = dataclasses.replace(old.settings, pod_uid="new")
        backend = SimulatedGPUs(state_dir=root / "gpus", node_name=NODE, count=4)
        new = NodeServer(settings, backend, claims=MemoryClaims())
        await new.start()
    try:
        assert settings.plugin_dir.is_dir()
        assert settings.dra_socket.exists()
    finally:
        await new.stop()
    assert not settings.plugin_dir.exists()


async def test_a_store_kept_aside_for_forensics_keeps_the_plugin_dir(tmp_path: Path) -> None:
    async with running_node(tmp_path, remove_plugin_dir_when_unused=True) as node:
        kept = node.settings.plugin_dir / f"claims.db{directories.KEPT_ASIDE_MARK}20260101T000000"
        kept.write_bytes(b"")
    assert kept.exists()


def _waiting_on(inode: int) -> bool:
    """Whether a lock request on ``inode`` is blocked (``/proc/locks``: ``->`` lines)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "->" and fields[6].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


async def test_a_start_waits_for_a_removal_and_makes_the_dir_again(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, remove_plugin_dir_when_unused=True)
    directories.prepare_directories(settings)
    departing = directories.hold_plugin_dir(settings)
    fcntl.flock(departing, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as release_plugin_dir does
    starting = asyncio.create_task(asyncio.to_thread(directories.hold_plugin_dir, settings))
    inode = os.fstat(departing).st_ino
    while not _waiting_on(inode):  # the start waits on the departing instance's lock
        assert not starting.done()
        await asyncio.sleep(0.01)
    settings.plugin_dir.rmdir()
    os.close(departing)
    held = await asyncio.wait_for(starting, 10)
    try:
        assert settings.plugin_dir.is_dir()
        assert os.fstat(held).st_ino == os.lstat(settings.plugin_dir).st_ino
    finally:
        os.close(held)
