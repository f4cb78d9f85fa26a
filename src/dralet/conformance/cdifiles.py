"""What a container runtime would see in a CDI directory: the specs it can load, and
(through inotify) whether a spec file was ever written in place rather than put there
whole (renamed in, or linked in from an unnamed temp file)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dralet import inotify
from dralet.cdi import spec as cdi_spec

__all__ = ["SPEC_SUFFIXES", "SpecWatch", "defined_devices", "invalid_specs"]

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
# Writing to a file under its final name is writing in place. A name appearing is not,
# by itself: a file linked in (``O_TMPFILE`` then ``linkat``) raises IN_CREATE with every
# byte already written, as a rename raises IN_MOVED_TO. Closing it is not either: a
# writer that keeps its temp file open (and locked) until it is in place closes it under
# the final name. (A file created empty and never written is no half-written read; the
# validity check reports it.)
IN_PLACE = inotify.InotifyEvents.MODIFY
APPEARED = inotify.InotifyEvents.CREATE | inotify.InotifyEvents.MOVED_TO


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
    whole: set[str] = field(default_factory=set)
    """Spec files that appeared whole (renamed or linked in: the atomic ways) and were
    not written to under their name after."""
    in_place: set[str] = field(default_factory=set)
    """Spec files written under their final name (a runtime may read them half-written)."""
    unwatched: str = ""
    """Why nothing is watched ('' while watching)."""
    _watch: inotify.Inotify | None = None

    def start(self) -> bool:
        """Start watching; False (and ``unwatched`` says why) when it cannot."""
        try:
            watch = inotify.Inotify()
        except inotify.InotifyUnavailableError as exc:
            self.unwatched = f"no inotify here: {exc.strerror}"
            return False
        try:
            watch.add(self.cdi_dir, IN_PLACE | APPEARED)
        except FileNotFoundError:
            watch.close()
            self.unwatched = f"{self.cdi_dir} did not exist to watch"
            return False
        except OSError:
            watch.close()
            raise
        self._watch = watch
        return True

    def drain(self) -> None:
        if self._watch is None:
            return
        for event in self._watch.read():
            if not event.name.endswith(SPEC_SUFFIXES):
                continue
            if event.mask & IN_PLACE:
                self.in_place.add(event.name)
                self.whole.discard(event.name)
            elif event.mask & APPEARED and event.name not in self.in_place:
                self.whole.add(event.name)

    def close(self) -> None:
        if self._watch is not None:
            self.drain()
            self._watch.close()
            self._watch = None
