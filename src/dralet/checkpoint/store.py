"""The single-file checkpoint of releases before the record database: read on upgrade.

Whatever sits at the checkpoint path (a symlink, FIFO, directory, an unreadable or huge
file) is read without following, blocking or loading it whole, and any failure to read
it is ``CheckpointCorruptError``: the driver fails closed instead of exiting or hanging.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from dralet import errors, fsutil
from dralet.checkpoint import codec
from dralet.checkpoint.model import Checkpoint

__all__ = ["MAX_CHECKPOINT_BYTES", "CheckpointStore"]

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 64 << 20
"""A larger file is refused as corrupt (10,000 prepared claims take about 10 MiB)."""


class CheckpointStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Checkpoint:
        """The stored checkpoint; a missing file is an empty one, a corrupt one an error."""
        raw = self.read_raw()
        return Checkpoint() if raw is None else self.decode(raw)

    def read_raw(self) -> bytes | None:
        """The stored bytes, or None when there is no file; unreadable is corrupt."""
        try:
            return fsutil.read_file(self.path, max_size=MAX_CHECKPOINT_BYTES)
        except OSError as exc:
            raise errors.CheckpointCorruptError(str(self.path), _reason(exc)) from exc

    def decode(self, raw: bytes) -> Checkpoint:
        try:
            checkpoint, _ = codec.decode(raw)
        except codec.CodecError as exc:
            raise errors.CheckpointCorruptError(str(self.path), str(exc)) from exc
        return checkpoint

    def save(self, checkpoint: Checkpoint) -> bytes:
        """Write ``checkpoint`` atomically; returns the exact bytes stored."""
        raw = codec.encode(checkpoint)
        fsutil.atomic_write(self.path, raw, mode=0o600)
        return raw


def _reason(exc: OSError) -> str:
    if isinstance(exc, fsutil.UnsafeFileError):
        return exc.problem
    return f"cannot read it: {exc.strerror or errno.errorcode.get(exc.errno or 0, exc)}"
