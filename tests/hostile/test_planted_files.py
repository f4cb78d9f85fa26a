"""Entries planted where dralet writes or reads a file: never followed, opened for writing,
truncated or blocked on; the write fails with an error naming the path instead."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dralet import fsutil
from dralet.cdi.store import SpecStore
from tests.hostile.conftest import (
    add_claim,
    allowed_dirs,
    assert_written_only_inside,
    without_unnamed_temp_files,
)
from tests.node.conftest import Node

KIND = "gpu.example.com/claim"
UID = "6f1d2c3b-0000-4000-8000-000000000001"
SECRET = b"root:secret-hash:19000:0:99999:7:::\n"
BOUNDED_WAIT = 10.0
"""Seconds a read that must not block gets before the test gives up on it."""


def _symlink(path: Path, victim: Path) -> None:
    path.symlink_to(victim)


def _hardlink(path: Path, victim: Path) -> None:
    os.link(victim, path)


def _fifo(path: Path, victim: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path, victim: Path) -> None:
    # Bound under a short name (sun_path is 108 bytes), then renamed into place.
    short = path.parent / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(os.path.relpath(short))
    except OSError:
        sock.bind(str(short))
    sock.close()
    short.rename(path)


def _device(path: Path, victim: Path) -> None:
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")


def _directory(path: Path, victim: Path) -> None:
    path.mkdir()


PLANTS: dict[str, Callable[[Path, Path], None]] = {
    "symlink": _symlink,
    "hardlink": _hardlink,
    "fifo": _fifo,
    "socket": _socket,
    "device": _device,
    "directory": _directory,
}


@pytest.fixture(autouse=True, params=["unnamed", "named"])
def temp_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with unnamed temp files (``O_TMPFILE``) and without."""
    if request.param == "named":
        without_unnamed_temp_files(monkeypatch)
    return str(request.param)


def _assert_untouched(victim: Path) -> None:
    assert victim.read_bytes() == SECRET


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the directory written to, standing for /etc/shadow."""
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@pytest.fixture
def known_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the first temp name guessable, as a planter that guessed it would see it."""
    tokens = iter(["0123456789abcdef"])
    real = fsutil.secrets.token_hex
    monkeypatch.setattr(fsutil.secrets, "token_hex", lambda n: next(tokens, None) or real(n))
    return "0123456789abcdef"


def _temp_names(target: Path, token: str) -> list[Path]:
    # Where this release would put its temp file with a known token, and where the
    # previous release put it (the writer's PID): both are planted.
    return [
        target.with_name(f".{target.name}.{token}.tmp"),
        target.with_name(f".{target.name}.{os.getpid()}.tmp"),
    ]


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replaced"])
@pytest.mark.parametrize("kind", sorted(set(PLANTS) - {"directory"}))
def test_an_entry_planted_at_the_temp_name_is_never_written_through(
    tmp_path: Path, victim: Path, known_token: str, kind: str, existing: bool
) -> None:
    target = tmp_path / "cdi" / "spec.json"
    target.parent.mkdir()
    if existing:  # an unnamed temp file then gets a temp name too, on its way in
        target.write_bytes(b"old content\n")
    for planted in _temp_names(target, known_token):
        PLANTS[kind](planted, victim)

    fsutil.atomic_write(target, b"new content\n", mode=0o644)

    assert victim.read_bytes() == SECRET
    assert target.read_bytes() == b"new content\n"
    assert not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.lstat(target).st_ino != os.lstat(victim).st_ino


@pytest.mark.parametrize("kind", ["symlink", "fifo", "socket", "device", "directory"])
def test_a_special_entry_at_the_target_fails_the_write_naming_the_path(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    target = tmp_path / "spec.json"
    PLANTS[kind](target, victim)
    before = os.lstat(target)

    with pytest.raises(fsutil.UnsafeFileError, match="not a regular file") as failure:
        fsutil.atomic_write(target, b"new\n")

    assert str(target) in str(failure.value)
    assert victim.read_bytes() == SECRET
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # left as found
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_hard_link_at_the_target_is_replaced_never_written_through(
    tmp_path: Path, victim: Path
) -> None:
    target = tmp_path / "spec.json"
    os.link(victim, target)
    fsutil.atomic_write(target, b"new\n")
    assert victim.read_bytes() == SECRET
    assert target.read_bytes() == b"new\n"
    assert victim.stat().st_nlink == 1


def test_temp_files_are_created_exclusively_under_unpredictable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, temp_route: str
) -> None:
    opened: list[tuple[str, int]] = []
    linked: list[str] = []
    real_open, real_link = fsutil.os.open, fsutil.os.link

    def spy_open(path: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    def spy_link(source: str, target: str, **kwargs: object) -> None:
        linked.append(target)
        real_link(source, target, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsutil.os, "open", spy_open)
    monkeypatch.setattr(fsutil.os, "link", spy_link)
    for content in (b"1", b"2", b"3"):  # created, then replaced twice
        fsutil.atomic_write(tmp_path / "a.json", content)
    assert (tmp_path / "a.json").read_bytes() == b"3"

    if temp_route == "unnamed":
        # Written with no name at all, linked in directly while the target is absent,
        # and under a fresh temp name (renamed over it) once it exists.
        unnamed = os.O_TMPFILE | os.O_CLOEXEC
        assert [f & unnamed == unnamed for name, f in opened if name == "."] == [True] * 3
        assert not [name for name, _ in opened if name.endswith(".tmp")]
        assert linked[0] == "a.json"
        temps = [name for name in linked if name != "a.json"]
    else:
        made = [(name, flags) for name, flags in opened if name.endswith(".tmp")]
        required = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        assert all(flags & required == required for _, flags in made)
        assert linked == []
        temps = [name for name, _ in made]
    assert len(set(temps)) == len(temps) == (2 if temp_route == "unnamed" else 3)
    assert all(fsutil.is_temp_name(name, target_prefix="a.json") for name in temps)
    assert all(str(os.getpid()) not in name for name in temps)
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


@contextlib.contextmanager
def _unblock_fifo_after(path: Path) -> Iterator[None]:
    """If a read blocks on the FIFO anyway, open its other end so the thread can finish."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)


def _returns_within_bound(call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread; the exception it raised, failing if it does not return."""
    done = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    finished = done.wait(BOUNDED_WAIT)
    assert finished, f"{call} blocked for {BOUNDED_WAIT} s"
    return outcome[0]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "socket", "device", "directory"])
def test_reading_a_spec_never_follows_or_blocks(tmp_path: Path, victim: Path, kind: str) -> None:
    store = SpecStore(tmp_path, KIND)
    path = store.path_for(UID)
    PLANTS[kind](path, victim)
    with _unblock_fifo_after(path):
        error = _returns_within_bound(lambda: store.read(UID))
    assert isinstance(error, fsutil.UnsafeFileError)
    assert str(path) in str(error)
    assert store.exists(UID) is False


@pytest.mark.parametrize("kind", ["symlink", "fifo", "socket", "device"])
def test_a_lock_file_is_never_opened_through_a_planted_entry(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    path = tmp_path / "claim.lock"
    PLANTS[kind](path, victim)
    with (
        pytest.raises(fsutil.UnsafeFileError, match="not a lock file"),
        fsutil.FileLock(path).hold(),
    ):
        pass
    assert victim.read_bytes() == SECRET


@pytest.mark.parametrize("kind", ["symlink", "fifo", "socket", "device"])
async def test_the_claim_lock_file_is_never_opened_through_a_planted_entry(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    path = tmp_path / "claims.lock"
    PLANTS[kind](path, victim)
    with pytest.raises(fsutil.UnsafeFileError, match="not a lock file"):
        async with fsutil.KeyedLocks(path).acquire("claim"):
            pass
    assert victim.read_bytes() == SECRET  # noqa: ASYNC240


def test_a_planted_lock_dir_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "locks").symlink_to(victim.parent)
    mode = stat.S_IMODE(victim.parent.stat().st_mode)
    with pytest.raises(fsutil.UnsafeFileError, match="symbolic link"):
        fsutil.ensure_private_dir(tmp_path / "locks")
    assert stat.S_IMODE(victim.parent.stat().st_mode) == mode  # never chmod-ed through it


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
async def test_a_planted_spec_path_fails_only_that_claim(
    node: Node, victim: Path, kind: str
) -> None:
    victim_claim = add_claim(node, "victim", "gpu-0")
    other = add_claim(node, "other", "gpu-1")
    path = SpecStore(node.settings.cdi_dir, node.settings.cdi_kind).path_for(victim_claim.uid)
    PLANTS[kind](path, victim)

    result = await node.plugin.prepare([victim_claim, other])

    assert str(path) in result.claims[victim_claim.uid].error
    assert result.claims[other.uid].error == ""
    _assert_untouched(victim)
    assert node.backend.in_use() == {"gpu-1": other.uid}  # the failed claim holds nothing
    assert_written_only_inside(node.settings.plugin_dir.parents[2], [*allowed_dirs(node)])


def test_unsafe_file_error_is_an_os_error_with_the_path() -> None:
    error = fsutil.UnsafeFileError("/x/y", "is a FIFO, not a regular file")
    assert isinstance(error, OSError)
    assert error.errno == errno.EPERM
    assert str(error) == "/x/y is a FIFO, not a regular file"
