"""No fsync, rename or unlink runs on the event loop: a slow disk never stalls gRPC,
health or the publisher. The claim records' fsyncs happen inside SQLite, on the store's
writer thread by construction; every one Python makes is watched here."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dralet.testing import MemoryClaims, MemoryDevices, allocated_claim, running_node
from dralet.testing.node import node_settings

WATCHED = ("fsync", "fdatasync", "rename", "replace", "unlink", "rmdir")


@pytest.fixture
def on_loop_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The watched calls made on the main thread (where the test's event loop runs)."""
    loop_thread = threading.get_ident()
    seen: list[str] = []

    def watch(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == loop_thread:
                seen.append(f"{name}{args[:1]}")
            return real(*args, **kwargs)

        return call

    for name in WATCHED:
        monkeypatch.setattr(os, name, watch(name, getattr(os, name)))
    return seen


async def test_prepare_and_unprepare_do_no_durable_io_on_the_loop(
    tmp_path: Path, on_loop_thread: list[str]
) -> None:
    claims = MemoryClaims()
    batch = [claims.add(allocated_claim(f"c{i}", devices=[("gpu", f"gpu-{i}")])) for i in range(8)]
    async with running_node(node_settings(tmp_path), MemoryDevices(8), claims=claims) as node:
        on_loop_thread.clear()  # start-up (directories, recovery) is not on the RPC path
        for claim in batch:
            assert (await node.prepare(claim)).kubelet_error == ""
        for claim in batch:
            assert (await node.unprepare(claim)).kubelet_error == ""
        seen = list(on_loop_thread)
    assert seen == []


async def test_a_large_calls_file_checks_run_in_one_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each claim's spec and metadata files are looked up before it is planned; for a
    call of many claims the lookups run together off the loop, where an ``lstat`` would
    hand the GIL to the spec writer and wait to get it back."""
    claims = MemoryClaims()
    batch = [claims.add(allocated_claim(f"c{i}", devices=[("gpu", f"gpu-{i}")])) for i in range(64)]
    loop_thread = threading.get_ident()
    looked_up: list[bool] = []
    real = os.lstat

    def lstat(*args: Any, **kwargs: Any) -> Any:
        if "_" in os.fspath(args[0]).rsplit("/", 1)[-1]:  # a spec file of a claim
            looked_up.append(threading.get_ident() == loop_thread)
        return real(*args, **kwargs)

    async with running_node(node_settings(tmp_path), MemoryDevices(64), claims=claims) as node:
        monkeypatch.setattr(os, "lstat", lstat)
        assert (await node.prepare(*batch)).kubelet_error == ""
        assert (await node.unprepare(*batch)).kubelet_error == ""
        monkeypatch.undo()
    assert len(looked_up) >= 128  # every claim, at prepare and at unprepare
    # A turn with only a few claims to observe (the first) checks them inline.
    assert sum(looked_up) <= 8, f"{sum(looked_up)} of {len(looked_up)} lookups on the loop"


async def test_a_claim_whose_files_cannot_be_checked_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = MemoryClaims()
    batch = [claims.add(allocated_claim(f"c{i}", devices=[("gpu", f"gpu-{i}")])) for i in range(32)]
    broken = batch[7]["metadata"]["uid"]
    real = os.lstat

    def lstat(*args: Any, **kwargs: Any) -> Any:
        if broken in os.fspath(args[0]):
            raise PermissionError(13, "Permission denied", os.fspath(args[0]))
        return real(*args, **kwargs)

    async with running_node(node_settings(tmp_path), MemoryDevices(32), claims=claims) as node:
        monkeypatch.setattr(os, "lstat", lstat)
        result = await node.prepare(*batch)
        monkeypatch.undo()
    failed = {uid: claim.error for uid, claim in result.claims.items() if claim.error}
    assert list(failed) == [broken]
    assert "Permission denied" in failed[broken]
