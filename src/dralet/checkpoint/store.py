"""The checkpoint file on disk: load, atomic save, and quarantine of a corrupt file."""

from __future__ import annotations

import time
from pathlib import Path

from dralet import errors, failpoints, fsutil
from dralet.checkpoint import codec
from dralet.checkpoint.model import Checkpoint

__all__ = ["CheckpointStore"]

FAILPOINT_WRITE = "checkpoint.write"
failpoints.declare(
    *(
        f"{FAILPOINT_WRITE}.{s}"
        for s in ("before-fsync", "after-fsync", "after-rename", "after-dir-fsync")
    )
)


class CheckpointStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Checkpoint:
        """The stored checkpoint; a missing file is an empty one, a corrupt one an error."""
        raw = self.read_raw()
        return Checkpoint() if raw is None else self.decode(raw)

    def read_raw(self) -> bytes | None:
        """The stored bytes, or None when there is no file."""
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def decode(self, raw: bytes) -> Checkpoint:
        try:
            checkpoint, _ = codec.decode(raw)
        except codec.CodecError as exc:
            raise errors.CheckpointCorruptError(str(self.path), str(exc)) from exc
        return checkpoint

    def save(self, checkpoint: Checkpoint) -> bytes:
        """Write ``checkpoint`` atomically; returns the exact bytes stored."""
        raw = codec.encode(checkpoint)
        fsutil.atomic_write(self.path, raw, mode=0o600, failpoint=FAILPOINT_WRITE)
        return raw

    def keep_aside(self) -> Path | None:
        """Copy an unusable file aside for forensics; returns the copy's path.

        The original stays where it is, so a restart fails closed again instead of
        starting from a silently empty state.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        target = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        if not target.exists():
            fsutil.atomic_write(target, raw, mode=0o600)
        return target

    def reset(self) -> None:
        """Replace the file with an empty checkpoint (only once nothing is prepared)."""
        self.save(Checkpoint())
