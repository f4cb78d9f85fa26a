"""The directories a driver uses are checked at start: a broken or unsafe one is one clear
line and an exit status, never a traceback; the driver's own dirs are repaired."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from dralet.cluster import DriverPaths, DriverProcess, driver_args
from dralet.node import directories
from dralet.node.settings import DriverSettings
from tests.node.conftest import make_settings, running_node

ROLES = {
    "plugin dir": "plugin_dir",
    "registry dir": "registry_dir",
    "CDI dir": "cdi_dir",
    "backend state dir": "backend_state_dir",
}
EXIT_WITHIN = 30.0


def _settings(root: Path) -> DriverSettings:
    # Each directory one level below its own parent, so a test can break that parent.
    return make_settings(
        root,
        cdi_dir=root / "run" / "cdi",
        registry_dir=root / "kubelet" / "plugins_registry",
        backend_state_dir=root / "state" / "gpus",
    )


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere")


def _loop(path: Path) -> None:
    path.symlink_to(path)


def _file(path: Path) -> None:
    path.write_text("not a directory\n")


def _dangling_parent(path: Path) -> None:
    path.parent.rmdir()
    path.parent.symlink_to(path.parent.parent / "gone")


BROKEN: dict[str, tuple[Callable[[Path], None], str]] = {
    "dangling-symlink": (_dangling, "is a dangling symbolic link"),
    "symlink-loop": (_loop, "symbolic link loop"),
    "file": (_file, "is a regular file, not a directory"),
    "dangling-parent": (_dangling_parent, "cannot be created"),
}


def _path_for(settings: DriverSettings, role: str) -> Path:
    path = getattr(settings, ROLES[role])
    assert isinstance(path, Path)
    return path


@pytest.mark.parametrize("role", sorted(ROLES))
@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_a_broken_directory_is_one_clear_error(tmp_path: Path, role: str, breakage: str) -> None:
    settings = _settings(tmp_path)
    path = _path_for(settings, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    damage, message = BROKEN[breakage]
    damage(path)
    private = role in ("plugin dir", "backend state dir")
    if private and breakage in ("dangling-symlink", "symlink-loop"):
        message = "is a symbolic link"  # the driver's own dirs must be real directories

    with pytest.raises(directories.DirectoryError) as failure:
        directories.prepare_directories(settings)

    text = str(failure.value)
    assert text.startswith(f"{role} {path} ")
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_directory_writable_by_others_is_refused_or_if_ours_repaired(
    tmp_path: Path, role: str
) -> None:
    settings = _settings(tmp_path)
    path = _path_for(settings, role)
    path.mkdir(parents=True)
    path.chmod(0o777)
    if role in ("registry dir", "CDI dir"):
        with pytest.raises(directories.DirectoryError, match="writable by group or other"):
            directories.prepare_directories(settings)
        assert stat.S_IMODE(path.stat().st_mode) == 0o777  # another program's choice
        return
    notes = directories.prepare_directories(settings).notes
    assert stat.S_IMODE(path.stat().st_mode) == 0o700  # the driver's own: tightened
    assert [n for n in notes if n.startswith(f"{role} {path} ")] != []


def test_a_shared_directory_may_be_a_symlink_to_a_real_one(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    real = tmp_path / "run-cdi"
    real.mkdir(mode=0o755)
    settings.cdi_dir.parent.mkdir(parents=True, exist_ok=True)
    settings.cdi_dir.symlink_to(real)
    assert directories.prepare_directories(settings).notes == []


def test_an_ancestor_writable_by_others_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "open"
    shared.mkdir()
    shared.chmod(0o777)
    settings = make_settings(shared / "node")
    with pytest.raises(directories.DirectoryError, match=f"lies under {shared}, which is"):
        directories.prepare_directories(settings)
    shared.chmod(0o1777)  # sticky, like /tmp: nobody else can rename our dirs
    directories.prepare_directories(settings)


def test_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    settings = _settings(tmp_path)
    settings.cdi_dir.mkdir(parents=True)
    os.chown(settings.cdi_dir, 12345, 12345)
    with pytest.raises(directories.DirectoryError, match="is owned by uid 12345"):
        directories.prepare_directories(settings)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_refused_directory_leaves_none_of_those_made_before_it(tmp_path: Path) -> None:
    root = tmp_path / "node"
    settings = _settings(root)
    settings.cdi_dir.parent.parent.mkdir(exist_ok=True)
    settings.cdi_dir.parent.write_text("a file where the CDI dir's parent belongs\n")
    before = _tree(tmp_path)

    with pytest.raises(directories.DirectoryError, match="cannot be looked up: Not a directory"):
        directories.prepare_directories(settings)

    # The plugin dir and the registry dir (with their parents) were made, then removed again.
    assert _tree(tmp_path) == before


def test_undo_removes_only_what_was_made_and_is_still_empty(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings.cdi_dir.mkdir(parents=True)  # the runtime's already: never removed
    prepared = directories.prepare_directories(settings)
    assert set(prepared.made) == {
        settings.plugin_dir.parent,
        settings.plugin_dir,
        settings.registry_dir.parent,
        settings.registry_dir,
        settings.backend_state_dir.parent,
        settings.backend_state_dir,
    }
    assert prepared.made.index(settings.registry_dir.parent) < prepared.made.index(
        settings.registry_dir
    )
    (settings.plugin_dir / "dralet.db").write_text("")  # a start that got as far as writing

    prepared.undo()

    assert settings.plugin_dir.is_dir() and settings.cdi_dir.is_dir()
    assert not settings.registry_dir.parent.exists()
    assert not settings.backend_state_dir.parent.exists()


def test_missing_directories_are_created_with_their_modes(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    directories.prepare_directories(settings)
    modes = {role: stat.S_IMODE(_path_for(settings, role).stat().st_mode) for role in ROLES}
    assert modes == {
        "plugin dir": 0o700,
        "registry dir": 0o750,
        "CDI dir": 0o755,
        "backend state dir": 0o700,
    }


async def test_the_driver_refuses_to_start_on_a_broken_directory(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings.cdi_dir.parent.mkdir()
    settings.cdi_dir.symlink_to(tmp_path / "nowhere")
    with pytest.raises(directories.DirectoryError, match="dangling symbolic link"):
        async with running_node(tmp_path, cdi_dir=settings.cdi_dir):
            pass
    assert not settings.dra_socket.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("role", ["CDI dir", "plugin dir", "backend state dir"])
async def test_dralet_run_exits_with_one_line_on_a_broken_directory(
    tmp_path: Path, role: str
) -> None:
    paths = DriverPaths(tmp_path / "node")
    target = {
        "CDI dir": paths.cdi_dir,
        "plugin dir": paths.plugin_dir,
        "backend state dir": paths.state_dir,
    }[role]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(target)  # a loop
    log = tmp_path / "driver.log"
    driver = DriverProcess(driver_args(paths, api_url=None), log_path=log, mode="exec")
    driver.start()
    try:
        code = await driver.wait(within=EXIT_WITHIN)
    finally:
        await driver.kill()
    text = log.read_text()
    assert code == directories.EXIT_UNUSABLE_DIRECTORY, text
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "cannot start" in line]
    assert len(lines) == 1
    assert f"{role} {target} " in lines[0]
