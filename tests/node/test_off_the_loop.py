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
