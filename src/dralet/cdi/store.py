"""Transient per-claim CDI spec files in the CDI directory.

One file per claim: ``<vendor>-<class>_<claimUID>.json`` (the CDI library's transient
spec name), written atomically through ``fsutil.atomic_write`` and removed by unlink.
``scan`` lists the files of our kind only, so two drivers can share one CDI directory;
``sweep_temp_files`` likewise removes only temp leftovers of our own spec files.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dralet import failpoints, fsutil
from dralet.cdi import names, spec

__all__ = ["DEFAULT_CDI_DIR", "SpecChange", "SpecFile", "SpecStamp", "SpecStore", "WrittenSpec"]

DEFAULT_CDI_DIR = Path("/var/run/cdi")
MAX_SPEC_BYTES = 4 << 20
"""A spec file larger than this is refused when read back (ours are a few KiB)."""

FAILPOINT_WRITE = "cdi.write"
FAILPOINT_REMOVE = "cdi.remove"
failpoints.declare(
    *(
        f"{FAILPOINT_WRITE}.{step}"
        for step in ("before-fsync", "after-fsync", "after-rename", "after-dir-fsync")
    ),
    f"{FAILPOINT_REMOVE}.before-unlink",
    f"{FAILPOINT_REMOVE}.after-unlink",
)


SpecStamp = tuple[int, int, int]
"""A spec file's inode, size and modification time (ns): every rewrite puts a new file
in place (linked or renamed in), so an unchanged stamp is the file dralet wrote."""


@dataclass(frozen=True)
class SpecFile:
    """A spec file of ours found in the CDI directory."""

    claim_uid: str
    location: str
    """Its path as the directory listing gave it (``path`` is made from it on demand:
    a scan of thousands of files rarely needs one)."""
    stamp: SpecStamp | None = None
    """Set by ``scan(stamps=True)``; None for anything but a regular file."""

    @property
    def path(self) -> Path:
        return Path(self.location)


@dataclass(frozen=True)
class WrittenSpec:
    """A spec written (and, once ``apply`` returns, durable), with its stamp."""

    directory: Path
    name: str
    stamp: SpecStamp

    @property
    def path(self) -> Path:
        return self.directory / self.name  # on demand: a batch of writes rarely asks


class SpecChange(NamedTuple):
    """One claim's spec to write (``document``) or to remove (None)."""

    claim_uid: str
    document: dict[str, Any] | None
    checked: bool = False
    """The document is known valid, so it is not parsed back: ``spec.to_json`` made it
    from a validated ``Spec``, or it comes from a checksummed claim record that holds a
    spec written before."""


_COMPACT = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def _stamp(info: os.stat_result) -> SpecStamp:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _regular_stamp(info: os.stat_result) -> SpecStamp | None:
    return _stamp(info) if stat.S_ISREG(info.st_mode) else None


class SpecStore:
    """The CDI directory as seen by one driver (one vendor/class kind)."""

    def __init__(self, cdi_dir: Path, kind: str) -> None:
        vendor, cdi_class = names.validate_kind(kind)
        self.cdi_dir = cdi_dir
        self.kind = kind
        self._prefix = f"{vendor}-{cdi_class}_"
        self._dir_text = os.fspath(cdi_dir)
        """For ``exists`` (once per claim in every observation): no ``Path`` per call."""

    def file_name(self, claim_uid: str) -> str:
        return f"{self._prefix}{claim_uid.replace('/', '_')}.json"

    def path_for(self, claim_uid: str) -> Path:
        return self.cdi_dir / self.file_name(claim_uid)

    def ensure_dir(self) -> None:
        # The CDI dir is read by the runtime, which may run as another user: 0755 like the
        # Go CDI library; the spec files inside stay 0644 for the same reason.
        self.cdi_dir.mkdir(parents=True, exist_ok=True, mode=0o755)

    def write(self, claim_uid: str, document: dict[str, Any]) -> Path:
        """Write a claim's spec document atomically; it is parsed back first, strictly."""
        (written,) = self.apply([SpecChange(claim_uid, document)])
        if isinstance(written, BaseException):
            raise written
        assert isinstance(written, WrittenSpec)
        return written.path

    def _write(
        self,
        directory: fsutil.Directory,
        claim_uid: str,
        document: dict[str, Any],
        *,
        checked: bool = False,
    ) -> WrittenSpec:
        if not checked:
            spec.from_json(document)
        name = self.file_name(claim_uid)
        # Compact: runtimes parse it, nobody edits it (``jq`` shows it readably).
        data = _COMPACT.encode(document).encode() + b"\n"
        info = directory.replace(name, data, mode=0o644, failpoint=FAILPOINT_WRITE)
        return WrittenSpec(self.cdi_dir, name, _stamp(info))

    def remove(self, claim_uid: str) -> bool:
        """Unlink a claim's spec; True if it existed. A missing file is success."""
        return fsutil.remove_file(self.path_for(claim_uid), failpoint=FAILPOINT_REMOVE)

    def apply(self, changes: Sequence[SpecChange]) -> list[WrittenSpec | bool | BaseException]:
        """Write (a document) or remove (None) several claims' specs, then make all of
        them durable with ONE fsync of the directory. A result per change: the written
        spec, whether a removed file existed, or the error of that change alone. A failed
        directory fsync is every change's error: none of them is known durable."""
        writes = any(change.document is not None for change in changes)
        try:
            if writes:
                self.ensure_dir()
            directory = fsutil.Directory(self.cdi_dir)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and not writes:
                return [False] * len(changes)  # no CDI dir: no spec to remove
            return [exc] * len(changes)
        results: list[WrittenSpec | bool | BaseException] = []
        with directory:
            for uid, document, checked in changes:
                try:
                    if document is None:
                        name = self.file_name(uid)
                        results.append(directory.remove(name, failpoint=FAILPOINT_REMOVE))
                    else:
                        results.append(self._write(directory, uid, document, checked=checked))
                except Exception as exc:  # noqa: BLE001 - this change's own error
                    results.append(exc)
            # Only a new name (link, rename) or an unlink needs the directory made durable.
            if any(r is True or isinstance(r, WrittenSpec) for r in results):
                try:
                    directory.fsync()
                except OSError as exc:
                    return [exc] * len(results)
                if writes:
                    failpoints.hit(f"{FAILPOINT_WRITE}.after-dir-fsync")
        return results

    def exists(self, claim_uid: str) -> bool:
        """Whether a regular spec file is there (a symlink or FIFO of that name is not)."""
        try:
            return stat.S_ISREG(
                os.lstat(os.path.join(self._dir_text, self.file_name(claim_uid))).st_mode
            )
        except FileNotFoundError:
            return False

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        """The stored document; never follows a symlink or blocks on a FIFO."""
        raw = fsutil.read_file(self.path_for(claim_uid), max_size=MAX_SPEC_BYTES)
        if raw is None:
            return None
        document: dict[str, Any] = json.loads(raw)
        return document

    def scan(self, *, stamps: bool = False) -> list[SpecFile]:
        """Every spec file of our kind in the CDI directory, sorted by claim UID; with
        ``stamps`` each one's ``SpecStamp`` (one lstat per file)."""
        found: list[SpecFile] = []
        try:
            entries = list(os.scandir(self.cdi_dir))
        except FileNotFoundError:
            return found
        for entry in entries:
            if entry.name.startswith(self._prefix) and entry.name.endswith(".json"):
                uid = entry.name[len(self._prefix) : -len(".json")]
                stamp = None
                if stamps:
                    try:
                        stamp = _regular_stamp(entry.stat(follow_symlinks=False))
                    except FileNotFoundError:
                        continue
                found.append(SpecFile(uid, entry.path, stamp))
        return sorted(found, key=lambda f: f.claim_uid)

    def stray_temp_files(self) -> list[Path]:
        """Temp files of our spec files a crash left behind that no live writer holds."""
        return fsutil.list_temp_files(self.cdi_dir, target_prefix=self._prefix)

    def sweep_temp_files(self) -> list[Path]:
        """Remove our spec files' temp leftovers that no live writer holds; never others'."""
        return fsutil.sweep_temp_files(self.cdi_dir, target_prefix=self._prefix)
