"""The example GPUs' "hardware" state: the holds spread over at most 64 files by GPU, so a
take or give-back reads and writes only its own GPU's file, whatever else is held, and a
start reads at most 64 files; a lock per file that every process using the state
directory honours; an earlier release's single file taken over."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest

from dralet.drivers.example.gpus import SHARDS, SimulatedGPUs, held_devices
from dralet.errors import ClaimError
from dralet.node.backend import AllocatedDevice, ClaimRef, ClaimUID


def _ref(index: int) -> ClaimRef:
    return ClaimRef(ClaimUID(f"00000000-0000-4000-8000-{index:012d}"), "default", f"c{index}")


def _device(name: str, *, share_id: str = "", memory: str = "") -> AllocatedDevice:
    capacity = {"memory": memory} if memory else {}
    return AllocatedDevice(
        request="gpu", pool="node-a", device=name, share_id=share_id, consumed_capacity=capacity
    )


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    """Each file's inode and mtime: a rewrite (atomic, by rename) changes both."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.iterdir()}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The holds files opened meanwhile (by name; temp and lock files aside)."""
    seen: list[str] = []
    real = os.open

    def opened(path: str | Path, flags: int, *args: Any, **kwargs: Any) -> int:
        name = os.path.basename(path)
        if name.endswith(".json") and not name.startswith("."):
            seen.append(name)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opened)
    return seen


async def test_a_take_and_give_back_touch_only_their_gpus_file(
    tmp_path: Path, reads: list[str]
) -> None:
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=SHARDS)
    for index in range(SHARDS - 1):
        await gpus.prepare(_ref(index), _device(f"gpu-{index}"))
    holds = tmp_path / "gpus" / "holds"
    before = _files(holds)
    assert len(before) == SHARDS - 1
    last = SHARDS - 1
    claim, device = _ref(last), _device(f"gpu-{last}")
    reads.clear()

    prepared = await gpus.prepare(claim, device)
    shard = holds / f"shard-{last}.json"
    assert json.loads(shard.read_text()) == {f"gpu-{last}": {"claim": claim.uid}}
    await gpus.release(claim, device, prepared.state)

    assert reads == [f"shard-{last}.json"] * 2  # the take's and the give-back's
    assert _files(holds) == before  # none rewritten, and the GPU's own file is gone
    assert len(gpus.in_use()) == SHARDS - 1


async def test_a_start_reads_one_file_per_shard_however_many_devices_are_held(
    tmp_path: Path, reads: list[str]
) -> None:
    held = SHARDS * 3
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=held)
    for index in range(held):
        await gpus.prepare(_ref(index), _device(f"gpu-{index}"))
    reads.clear()

    in_use = held_devices(tmp_path / "gpus")

    assert in_use == {f"gpu-{i}": _ref(i).uid for i in range(held)}
    assert sorted(reads) == sorted(f"shard-{k}.json" for k in range(SHARDS))
    # GPUs sharing a file: a give-back rewrites it with the others' holds kept.
    await gpus.release(_ref(SHARDS), _device(f"gpu-{SHARDS}"), {})
    assert json.loads((tmp_path / "gpus" / "holds" / "shard-0.json").read_text()) == {
        "gpu-0": {"claim": _ref(0).uid},
        f"gpu-{2 * SHARDS}": {"claim": _ref(2 * SHARDS).uid},
    }


async def test_a_partition_and_its_whole_gpu_read_only_their_own_gpus_file(
    tmp_path: Path, reads: list[str]
) -> None:
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=3, partitions=2)
    await gpus.prepare(_ref(1), _device("gpu-2"))
    reads.clear()

    await gpus.prepare(_ref(2), _device("gpu-0-part-1"))
    assert reads == ["shard-0.json"]
    reads.clear()
    with pytest.raises(ClaimError, match="gpu-0-part-1 is in use by claim"):
        await gpus.prepare(_ref(3), _device("gpu-0"))
    assert reads == ["shard-0.json"]


async def test_the_last_share_given_back_removes_the_gpus_file(tmp_path: Path) -> None:
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=1, shared=1)
    a, b = _ref(1), _ref(2)
    first = await gpus.prepare(a, _device("gpu-0", share_id="s-1", memory="10Gi"))
    second = await gpus.prepare(b, _device("gpu-0", share_id="s-2", memory="30Gi"))
    path = tmp_path / "gpus" / "holds" / "shard-0.json"
    assert json.loads(path.read_text()) == {
        "gpu-0": {"shares": {a.uid: {"s-1": "10Gi"}, b.uid: {"s-2": "30Gi"}}}
    }
    assert held_devices(tmp_path / "gpus") == {"gpu-0": sorted([a.uid, b.uid])}

    await gpus.release(a, _device("gpu-0", share_id="s-1"), first.state)
    assert gpus.shares() == {"gpu-0": {b.uid: {"s-2": "30Gi"}}}
    await gpus.release(b, _device("gpu-0", share_id="s-2"), second.state)
    assert not path.exists()
    assert await gpus.devices_in_use() == {}


async def test_the_info_file_is_written_once(tmp_path: Path) -> None:
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=1)
    device = _device("gpu-0")
    prepared = await gpus.prepare(_ref(1), device)
    uuid_file = tmp_path / "gpus" / "info" / "gpu-0" / "uuid"
    assert uuid_file.read_text() == gpus.device_uuid("gpu-0") + "\n"
    written = (uuid_file.stat().st_ino, uuid_file.stat().st_mtime_ns)
    await gpus.release(_ref(1), device, prepared.state)

    await gpus.prepare(_ref(2), device)
    assert (uuid_file.stat().st_ino, uuid_file.stat().st_mtime_ns) == written


async def test_a_take_waits_for_its_gpus_lock_held_elsewhere_and_no_other(
    tmp_path: Path,
) -> None:
    gpus = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=2)
    # An flock on its own open file description, as another driver process holds it.
    fd = os.open(tmp_path / "gpus" / "locks" / "shard-0.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        waiting = asyncio.create_task(gpus.prepare(_ref(1), _device("gpu-0")))
        await asyncio.wait_for(gpus.prepare(_ref(2), _device("gpu-1")), 10)
        await asyncio.sleep(0.2)
        assert not waiting.done()
        assert gpus.in_use() == {"gpu-1": _ref(2).uid}
    finally:
        os.close(fd)
    await asyncio.wait_for(waiting, 10)
    assert gpus.in_use() == {"gpu-0": _ref(1).uid, "gpu-1": _ref(2).uid}


async def test_two_backends_over_one_state_dir_refuse_each_others_device(
    tmp_path: Path,
) -> None:
    one = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=2, partitions=2)
    two = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name="node-a", count=2, partitions=2)
    results = await asyncio.gather(
        *(
            backend.prepare(_ref(i), _device(name))
            for i, (backend, name) in enumerate([(one, "gpu-0"), (two, "gpu-0-part-0")] * 4)
        ),
        return_exceptions=True,
    )
    taken = [r for r in results if not isinstance(r, BaseException)]
    assert len(taken) == 1, results  # of eight claims on one GPU's silicon, one got it
    assert all(isinstance(r, ClaimError) for r in results if r not in taken)
    assert len(one.in_use()) == 1


def test_an_earlier_releases_single_file_is_taken_over(tmp_path: Path) -> None:
    state = tmp_path / "gpus"
    (state / "holds").mkdir(parents=True)
    (state / "gpus.json").write_text(
        json.dumps(
            {
                "inUse": {"gpu-0": "uid-a", "gpu-1": "uid-old"},
                "shares": {"gpu-3": {"uid-c": {"s-1": "10Gi"}}},
            }
        )
    )
    newer = {"gpu-1": {"claim": "uid-b"}}
    (state / "holds" / "shard-1.json").write_text(json.dumps(newer))

    gpus = SimulatedGPUs(state_dir=state, node_name="node-a", count=4, shared=1)

    assert gpus.in_use() == {"gpu-0": "uid-a", "gpu-1": "uid-b"}
    assert gpus.shares() == {"gpu-3": {"uid-c": {"s-1": "10Gi"}}}
    assert not (state / "gpus.json").exists()
