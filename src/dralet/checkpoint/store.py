"""The checkpoint file on disk: load, atomic save, and quarantine of a corrupt file.

Whatever sits at the checkpoint path (a symlink, FIFO, directory, an unreadable or huge
file) is read without following, blocking or loading it whole, and any failure to read
it is ``CheckpointCorruptError``: the driver fails closed instead of exiting or hanging.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from pathlib import Path

from dralet import errors, failpoints, fsutil
from dralet.checkpoint import codec
from dralet.checkpoint.model import Checkpoint

__all__ = ["MAX_CHECKPOINT_BYTES", "CheckpointStore"]

log = logging.getLogger(__name__)

MAX_CHECKPOINT_BYTES = 64 << 20
"""A larger file is refused as corrupt (10,000 prepared claims take about 10 MiB)."""

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
        fsutil.atomic_write(self.path, raw, mode=0o600, failpoint=FAILPOINT_WRITE)
        return raw

    def _aside_path(self) -> Path:
        return self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")

    def keep_aside(self) -> Path | None:
        """Keep an unusable file aside for forensics; returns where, or None. Never raises.

        The copy is a second hard link, so nothing is read (a FIFO cannot block, a huge
        file is not copied) and the entry is kept exactly as found. The original stays
        where it is, so a restart fails closed again instead of starting from a silently
        empty state. A directory cannot be linked and is only kept by ``reset``.
        """
        target = self._aside_path()
        try:
            os.link(self.path, target, follow_symlinks=False)
        except FileExistsError:
            return target
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("could not keep the unusable checkpoint %s aside: %s", self.path, exc)
            return None
        with contextlib.suppress(OSError):
            fsutil.fsync_dir(self.path.parent)
        return target

    def reset(self) -> None:
        """Replace the file with an empty checkpoint (only once nothing is prepared).

        Whatever is at the path is ours to replace here: the plugin dir is private to
        the driver. A directory is moved aside first; any other entry is replaced by
        the rename, which never follows it.
        """
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            mode = 0
        if stat.S_ISDIR(mode):
            os.rename(self.path, self._aside_path())
        elif mode and not stat.S_ISREG(mode):
            os.unlink(self.path)
        self.save(Checkpoint())


def _reason(exc: OSError) -> str:
    if isinstance(exc, fsutil.UnsafeFileError):
        return exc.problem
    return f"cannot read it: {exc.strerror or errno.errorcode.get(exc.errno or 0, exc)}"
