"""Any entry at all where the claim records are kept — the record database, or the
``checkpoint.json`` of an older release not taken over yet: the driver comes up
fail-closed (or, with provably nothing prepared, reset), never exits, never hangs on it."""

from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dralet import errors, fsutil
from dralet.cdi import spec as cdi_spec
from dralet.cdi.store import SpecStore
from dralet.checkpoint import codec
from dralet.checkpoint.store import MAX_CHECKPOINT_BYTES, CheckpointStore
from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.kubelet import KubeletClaim, KubeletEmulator
from dralet.testing.claims import MemoryClaims
from tests.hostile.conftest import add_claim, node_with_one_claim, running_node

DRIVER = "gpu.example.com"
REGISTER_WITHIN = 30.0


def _sealed(data: str) -> bytes:
    return json.dumps({"data": data, "checksum": codec.checksum(data)}).encode()


def _content(raw: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.unlink()
        path.write_bytes(raw)

    return write


def _huge(path: Path) -> None:
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(MAX_CHECKPOINT_BYTES + 1)  # sparse: big to read, cheap to make


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _symlink(path: Path) -> None:
    # Even a link to a good checkpoint is refused: the file is never read through a link.
    real = path.with_name("elsewhere.json")
    path.rename(real)
    path.symlink_to(real)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


ENTRIES: dict[str, Callable[[Path], None]] = {
    "invalid-utf8": _content(b'{"data": "\xff\xfe\xfd", "checksum": "sha256:00"}'),
    "lone-surrogate": _content(
        _sealed(
            '{"apiVersion": "checkpoint.dralet.dev/v2", "kind": "DriverCheckpoint", '
            '"driver": "\\ud800", "claims": {}}'
        )
    ),
    "deep-nesting": _content(b"[" * 200_000 + b"]" * 200_000),
    "huge-number": _content(b'{"data": ' + b"7" * 50_000 + b"}"),
    "huge-file": _huge,
    "directory": _directory,
    "symlink": _symlink,
    "fifo": _fifo,
}


def _deny_reading(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """No read permission. Root reads any mode, so for root the open itself is refused."""
    if os.geteuid() != 0:
        path.chmod(0)
        return
    real_open = os.open

    def open_denied(target: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        if os.fspath(target) == str(path) and not flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(target, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsutil.os, "open", open_denied)


WHERE = ("store", "legacy")
"""The record database, or an older release's ``checkpoint.json`` met on upgrade."""
# Root reads any mode; the refusal is simulated on the Python open, which SQLite never uses.
CASES = [
    *((where, entry) for where in WHERE for entry in sorted(ENTRIES)),
    ("legacy", "no-read-permission"),
]


def _damage(name: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "no-read-permission":
        _deny_reading(monkeypatch, path)
    else:
        ENTRIES[name](path)


def _kind(path: Path) -> str:
    return fsutil.file_kind(os.lstat(path).st_mode)


@pytest.mark.parametrize(("where", "entry"), CASES)
async def test_driver_fails_closed_on_any_checkpoint_entry(
    short_root: Path, where: str, entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = short_root / "node"
    claims = MemoryClaims()
    checkpoint, prepared = await node_with_one_claim(
        root, claims=claims, released=False, legacy=where == "legacy"
    )
    _damage(entry, checkpoint, monkeypatch)
    kind = _kind(checkpoint)

    async with running_node(root, claims=claims) as node:
        assert node.driver.engine.fail_closed, entry
        health = health_pb2_grpc.HealthStub(node.plugin.channel())
        answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        fresh = add_claim(node, "fresh", "gpu-2")
        refused = await node.plugin.prepare([fresh])
        assert "not preparing new claims" in refused.claims[fresh.uid].error
        assert str(checkpoint) in refused.claims[fresh.uid].error
        assert node.backend.in_use() == {"gpu-1": prepared.uid}
        # What the CDI dir and the backend prove was prepared is still unprepared.
        assert (await node.plugin.unprepare([prepared])).kubelet_error == ""
        assert node.backend.in_use() == {}
        assert _kind(checkpoint) == kind  # the bad entry is left where it was


@pytest.mark.parametrize(("where", "entry"), CASES)
async def test_nothing_prepared_and_any_checkpoint_entry_is_reset_with_it_kept(
    short_root: Path, where: str, entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = short_root / "node"
    checkpoint, _ = await node_with_one_claim(
        root, claims=MemoryClaims(), released=True, legacy=where == "legacy"
    )
    _damage(entry, checkpoint, monkeypatch)
    kind = _kind(checkpoint)
    if entry == "no-read-permission":
        monkeypatch.undo()  # the reset file is readable again; only the first read failed
        _deny_once(monkeypatch, checkpoint)

    async with running_node(root) as node:
        assert not node.driver.engine.fail_closed
        assert node.driver.recovery is not None
        assert node.driver.recovery.count("corrupt-checkpoint-reset") == 1
        assert stat.S_ISREG(os.lstat(node.settings.store_path).st_mode)
        kept = sorted(checkpoint.parent.glob(f"{checkpoint.name}.corrupt-*"))
        assert [_kind(k) for k in kept if not k.name.endswith("-wal")] == [kind]
        again = add_claim(node, "again", "gpu-0")
        assert (await node.plugin.prepare([again])).kubelet_error == ""


def _deny_once(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    real_open = os.open
    denied: list[bool] = []

    def open_denied_once(target: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        if os.fspath(target) == str(path) and not denied and not flags & os.O_WRONLY:
            denied.append(True)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(target, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsutil.os, "open", open_denied_once)


def _seed_spec(paths: DriverPaths) -> str:
    """A spec of ours in the CDI dir: proof something may be prepared, so no reset."""
    uid = str(uuid.uuid4())
    kind = f"{DRIVER}/claim"
    document = cdi_spec.to_json(
        cdi_spec.Spec(
            kind=kind,
            devices=(
                cdi_spec.CDIDevice(
                    name=f"{uid}-gpu-0", container_edits=cdi_spec.ContainerEdits(env=("A=1",))
                ),
            ),
        )
    )
    SpecStore(paths.cdi_dir, kind).write(uid, document)
    return uid


def _write_good_checkpoint(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(
        _sealed(
            '{"apiVersion": "checkpoint.dralet.dev/v2", "kind": "DriverCheckpoint", '
            '"driver": "gpu.example.com", "claims": {}}'
        )
    )


@pytest.mark.e2e
@pytest.mark.parametrize("entry", sorted(ENTRIES))
async def test_driver_process_comes_up_fail_closed_on_any_checkpoint_entry(
    short_root: Path, entry: str
) -> None:
    paths = DriverPaths(short_root)
    _seed_spec(paths)
    _write_good_checkpoint(paths.checkpoint)
    ENTRIES[entry](paths.checkpoint)
    driver = DriverProcess(driver_args(paths, api_url=None), log_path=short_root / "driver.log")
    kubelet = KubeletEmulator(paths.registry_dir)
    try:
        driver.start()
        plugin = await kubelet.wait_for_plugin(DRIVER, within=REGISTER_WITHIN)
        claim = KubeletClaim("default", str(uuid.uuid4()), "fresh")
        refused = await plugin.prepare([claim])
        assert "not preparing new claims" in refused.claims[claim.uid].error, driver.log()
        health = health_pb2_grpc.HealthStub(plugin.channel())
        answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert driver.alive, driver.log()
        assert "failing closed" in driver.log()
        assert "Traceback" not in driver.log()
    finally:
        await kubelet.close()
        code = await driver.terminate()
    assert code == 0, driver.log()


def test_a_checkpoint_over_the_size_cap_is_refused_before_any_byte_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.json"
    with open(path, "wb") as f:
        f.truncate(MAX_CHECKPOINT_BYTES + 1)
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, size: int) -> bytes:
        reads.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(fsutil.os, "read", counting_read)
    with pytest.raises(errors.CheckpointCorruptError, match=f"{MAX_CHECKPOINT_BYTES}-byte limit"):
        CheckpointStore(path).load()
    assert reads == []
