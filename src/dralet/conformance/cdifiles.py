"""What a container runtime would see in a CDI directory: the specs it can load, and
(through inotify) whether a spec file was ever written in place rather than renamed in."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dralet.cdi import spec as cdi_spec

__all__ = ["SPEC_SUFFIXES", "SpecWatch", "defined_devices", "invalid_specs"]

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
# <sys/inotify.h>
IN_MODIFY = 0x002
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")
_READ_SIZE = 65536
# Creating or writing a file under its final name is writing in place. Closing it is
# not: a writer that keeps its temp file open (and locked) until after the rename closes
# it under the final name, with every byte already written and synced.
IN_PLACE = IN_CREATE | IN_MODIFY


def _load(path: Path) -> Any:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def _spec_paths(cdi_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in cdi_dir.iterdir() if p.suffix in SPEC_SUFFIXES)
    except FileNotFoundError:
        return []


def defined_devices(cdi_dir: Path) -> dict[str, Path]:
    """Qualified CDI device name → the valid spec file in ``cdi_dir`` that defines it."""
    defined: dict[str, Path] = {}
    for path in _spec_paths(cdi_dir):
        try:
            spec = cdi_spec.from_json(_load(path))
        except (OSError, ValueError, yaml.YAMLError, TypeError, AttributeError):
            continue  # a runtime skips specs it cannot load, too
        for qualified in spec.qualified_names():
            defined.setdefault(qualified, path)
    return defined


def invalid_specs(cdi_dir: Path, kinds: set[str]) -> list[str]:
    """'file: why' for each spec of one of ``kinds`` that is not valid for its cdiVersion."""
    problems: list[str] = []
    for path in _spec_paths(cdi_dir):
        try:
            document = _load(path)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: {exc}")  # unreadable: kind unknown, so ours too
            continue
        if not isinstance(document, dict) or document.get("kind") not in kinds:
            continue
        try:
            cdi_spec.from_json(document)
        except (ValueError, TypeError, AttributeError) as exc:
            version = document.get("cdiVersion", "?")
            problems.append(f"{path.name} (cdiVersion {version}): {exc}")
    return problems


@dataclass
class SpecWatch:
    """An inotify watch on a CDI directory, drained after each call."""

    cdi_dir: Path
    renamed: set[str] = field(default_factory=set)
    """Spec files that appeared by rename (the atomic way)."""
    in_place: set[str] = field(default_factory=set)
    """Spec files created or written under their final name (a runtime may read them
    half-written)."""
    unwatched: str = ""
    """Why nothing is watched ('' while watching)."""
    _fd: int = -1

    def start(self) -> bool:
        """Start watching; False (and ``unwatched`` says why) when it cannot."""
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            self.unwatched = "this system has no inotify"
            return False
        fd = int(libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        mask = IN_PLACE | IN_MOVED_TO
        if libc.inotify_add_watch(fd, os.fsencode(self.cdi_dir), mask) < 0:
            os.close(fd)
            error = ctypes.get_errno()
            if error == errno.ENOENT:
                self.unwatched = f"{self.cdi_dir} did not exist to watch"
                return False
            raise OSError(error, f"inotify_add_watch {self.cdi_dir} failed")
        self._fd = fd
        return True

    def drain(self) -> None:
        while self._fd >= 0:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
                offset += _EVENT.size + length
                name = raw.rstrip(b"\0").decode(errors="replace")
                if not name.endswith(SPEC_SUFFIXES):
                    continue
                if mask & IN_MOVED_TO:
                    self.renamed.add(name)
                elif mask & IN_PLACE:
                    self.in_place.add(name)

    def close(self) -> None:
        if self._fd >= 0:
            self.drain()
            os.close(self._fd)
            self._fd = -1
