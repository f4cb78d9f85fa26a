"""The node directories a driver uses: checked (and created) at start, swept of temp leftovers.

Four directories, two kinds. The plugin dir and the backend state dir are the driver's
own: each must be a real directory (a symlink there is refused, so a mode change or a
sweep can never land elsewhere), owned by root or by the driver's user, and a group- or
world-writable one is tightened to its private mode, like any daemon's own data dir.
The CDI dir and the registry dir are shared with the container runtime and the kubelet:
each may be a symlink to a real directory, but one writable by group or other is
refused, never changed, because another program set it up that way. Every ancestor must
not be writable by group or other unless it has the sticky bit (like ``/tmp``), or
another user could swap the directory itself.

Every fault is one ``DirectoryError`` naming the directory and what is wrong with it;
``dralet run`` logs it as one line and exits with ``EXIT_UNUSABLE_DIRECTORY``. A start
that fails removes again the directories it made (``Prepared.undo``), so bad input
leaves the node as it found it.

The plugin dir is also the driver's to remove (``release_plugin_dir``): every instance
holds a shared ``flock`` on it while it runs (``hold_plugin_dir``); one stopping cleanly
removes it only with the lock turned exclusive (no other instance in it, as during a
rolling update) and when nothing in it is still needed (no claim record, no copy of an
unusable store kept for forensics). An instance starting while another removes it waits
for the removal and makes the directory again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dralet import errors, fsutil
from dralet.cdi.store import SpecStore
from dralet.node.settings import DriverSettings

__all__ = [
    "EXIT_UNUSABLE_DIRECTORY",
    "KEPT_ASIDE_MARK",
    "DirectoryError",
    "DirectoryRule",
    "Prepared",
    "hold_plugin_dir",
    "prepare_directories",
    "release_plugin_dir",
    "rules_for",
    "sweep_temp_files",
]

EXIT_UNUSABLE_DIRECTORY = 78
"""Exit status of ``dralet run`` when a directory is unusable (``EX_CONFIG``)."""

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
KEPT_ASIDE_MARK = ".corrupt-"
"""In the name of a store file kept for forensics (``RecordStore.keep_aside``): a plugin
dir holding one is never removed."""
HOLD_ATTEMPTS = 5
"""Times ``hold_plugin_dir`` makes the plugin dir again after finding it removed by a
departing instance (each removal needs that instance's start and stop in between)."""


class DirectoryError(errors.PermanentError):
    """A directory the driver needs is missing and cannot be made, or is unsafe."""


@dataclass(frozen=True)
class DirectoryRule:
    role: str
    """What the directory is for, as named in messages (``CDI dir``)."""
    path: Path
    private: bool
    """The driver's own (repaired to ``mode``) rather than shared (refused if unsafe)."""
    mode: int
    """Mode when created, and for a private directory the mode it is kept at."""


def rules_for(settings: DriverSettings) -> list[DirectoryRule]:
    rules = [
        DirectoryRule("plugin dir", settings.plugin_dir, private=True, mode=0o700),
        # Created by the kubelet with 0750; only if it is missing do we make it.
        DirectoryRule("registry dir", settings.registry_dir, private=False, mode=0o750),
        # Read by the container runtime, possibly as another user: 0755 like the CDI library.
        DirectoryRule("CDI dir", settings.cdi_dir, private=False, mode=0o755),
    ]
    if settings.backend_state_dir is not None:
        rules.append(
            DirectoryRule("backend state dir", settings.backend_state_dir, private=True, mode=0o700)
        )
    return rules


def _fail(rule: DirectoryRule, problem: str) -> DirectoryError:
    return DirectoryError(f"{rule.role} {rule.path} {problem}")


def _create(rule: DirectoryRule, made: list[Path]) -> None:
    """Create the directory and any missing parents one level at a time, so ``made``
    lists exactly the ones this call created (a level another program creates in the
    meantime is not ours)."""
    missing: list[Path] = []
    path = rule.path
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for level in reversed(missing):
        try:
            # Parents as ``mkdir -p`` makes them; the directory itself with its mode.
            os.mkdir(level, rule.mode if level == rule.path else 0o777)
        except FileExistsError:
            continue  # made by someone else in the meantime: checked like any other
        except OSError as exc:
            parent, where = level.parent, ""
            if os.path.islink(parent) and not os.path.exists(parent):
                where = f" ({parent} is a dangling symbolic link to {os.readlink(parent)})"
            elif level != rule.path:
                where = f" ({level})"
            raise _fail(rule, f"cannot be created: {exc.strerror}{where}") from exc
        made.append(level)


def _follow(rule: DirectoryRule, made: list[Path]) -> os.stat_result:
    """``stat`` of the directory, with a clear message for each way it can be broken."""
    try:
        link = os.lstat(rule.path)
    except FileNotFoundError:
        _create(rule, made)
        link = os.lstat(rule.path)
    except OSError as exc:
        raise _fail(rule, f"cannot be looked up: {exc.strerror}") from exc
    if not stat.S_ISLNK(link.st_mode):
        return link
    target = os.readlink(rule.path)
    if rule.private:
        raise _fail(rule, f"is a symbolic link (to {target}); it must be a real directory")
    try:
        return os.stat(rule.path)
    except FileNotFoundError as exc:
        raise _fail(rule, f"is a dangling symbolic link (to {target})") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _fail(rule, f"is a symbolic link loop (via {target})") from exc
        raise _fail(rule, f"is a symbolic link (to {target}) that fails: {exc.strerror}") from exc


def _check_ancestors(rule: DirectoryRule) -> None:
    for ancestor in rule.path.resolve().parents:
        mode = os.stat(ancestor).st_mode
        if mode & _WRITABLE_BY_OTHERS and not mode & stat.S_ISVTX:
            raise _fail(
                rule,
                f"lies under {ancestor}, which is writable by group or other without the "
                f"sticky bit (mode {stat.S_IMODE(mode):04o}): another user could replace it",
            )


def _check(rule: DirectoryRule, made: list[Path]) -> str | None:
    """Check (and create or repair) one directory; returns a note on any repair made."""
    st = _follow(rule, made)
    if not stat.S_ISDIR(st.st_mode):
        raise _fail(rule, f"is {fsutil.file_kind(st.st_mode)}, not a directory")
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        raise _fail(rule, f"is owned by uid {st.st_uid}; it must be owned by root or uid {euid}")
    _check_ancestors(rule)
    mode = stat.S_IMODE(st.st_mode)
    if not mode & _WRITABLE_BY_OTHERS:
        return None
    if not rule.private:
        raise _fail(
            rule,
            f"is writable by group or other (mode {mode:04o}); anyone could plant files "
            "the runtime or the kubelet then trusts",
        )
    fsutil.ensure_private_dir(rule.path, mode=rule.mode)
    return (
        f"{rule.role} {rule.path} was writable by group or other (mode {mode:04o}); "
        f"set to {rule.mode:04o}"
    )


@dataclass(frozen=True)
class Prepared:
    """What ``prepare_directories`` did."""

    notes: list[str] = field(default_factory=list)
    """One per repair made."""
    made: list[Path] = field(default_factory=list)
    """The directories it created, parents before children."""

    def undo(self) -> None:
        """Remove the directories it created that are still empty (a start that failed
        leaves nothing behind; one that wrote into them keeps them)."""
        for path in reversed(self.made):
            with contextlib.suppress(OSError):
                path.rmdir()


def prepare_directories(settings: DriverSettings) -> Prepared:
    """Check every directory the driver uses, creating missing ones.

    Returns a note for each repair made and the directories created; raises
    ``DirectoryError`` for the first directory that cannot be used, after removing the
    ones this call created.
    """
    prepared = Prepared()
    try:
        for rule in rules_for(settings):
            note = _check(rule, prepared.made)
            if note is not None:
                prepared.notes.append(note)
    except BaseException:
        prepared.undo()
        raise
    return prepared


def sweep_temp_files(settings: DriverSettings) -> list[Path]:
    """Remove the temp files interrupted writes left in every directory the driver owns.

    In the shared CDI dir only temp files of this driver's own spec files; in the plugin
    dir and the backend state dir (both the driver's alone) every ``atomic_write`` temp
    file, in subdirectories too. A temp file a live writer still holds is left alone.
    """
    removed = SpecStore(settings.cdi_dir, settings.cdi_kind).sweep_temp_files()
    removed += fsutil.sweep_temp_files(settings.plugin_dir, recursive=True)
    state_dir = settings.backend_state_dir
    if state_dir is not None and not state_dir.is_relative_to(settings.plugin_dir):
        removed += fsutil.sweep_temp_files(state_dir, recursive=True)
    return removed


def _same_dir(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the directory at ``path`` (not removed, nor replaced)."""
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def hold_plugin_dir(settings: DriverSettings) -> int:
    """A shared ``flock`` on the plugin dir, for as long as this instance runs (the
    returned descriptor; ``release_plugin_dir`` gives it back). Waits while a departing
    instance removes the directory, then checks and makes it again."""
    for _ in range(HOLD_ATTEMPTS):
        try:
            fd = os.open(settings.plugin_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            prepare_directories(settings)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if _same_dir(fd, settings.plugin_dir):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        prepare_directories(settings)
    raise DirectoryError(
        f"plugin dir {settings.plugin_dir} was removed {HOLD_ATTEMPTS} times while starting"
    )


def _kept_aside(path: Path) -> bool:
    return any(KEPT_ASIDE_MARK in name for _, _, names in os.walk(path) for name in names)


def release_plugin_dir(settings: DriverSettings, fd: int, *, remove_if: Callable[[], bool]) -> bool:
    """Give back ``hold_plugin_dir``'s lock; first remove the plugin dir (and the backend
    state dir in it) when no other instance holds it, ``remove_if()`` says nothing in it
    is needed, and no unusable store file is kept there. Returns whether it was removed."""
    try:
        try:
            # Not atomic (flock(2)): the shared lock may go first; this instance is
            # leaving either way.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another instance runs in it
        path = settings.plugin_dir
        if not _same_dir(fd, path) or _kept_aside(path) or not remove_if():
            return False
        shutil.rmtree(path)
        fsutil.fsync_dir(path.parent)
        return True
    finally:
        os.close(fd)
