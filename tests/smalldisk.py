"""A real, small file system for disk-full and read-only tests: a tmpfs mounted for one
test (root only; skipped with the reason where mounting is not permitted), and a way to
fill it to a given number of free pages."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096


@contextlib.contextmanager
def mounted_tmpfs(size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` for the block; unmounted and removed after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = Path(tempfile.mkdtemp(prefix="dralet-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        mountpoint.rmdir()
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)
        mountpoint.rmdir()


def fill(directory: Path, *, free_pages: int) -> Path:
    """Fill ``directory``'s file system until ``free_pages`` pages are left; the filler file
    (unlink it and the space returns)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        page = b"\0" * PAGE
        with contextlib.suppress(OSError):
            while os.write(fd, page) == PAGE:
                pass
        size = os.lseek(fd, 0, os.SEEK_CUR)
        # Give back exactly the pages that should stay free.
        os.ftruncate(fd, max(0, (size // PAGE - free_pages) * PAGE))
    finally:
        os.close(fd)
    stats = os.statvfs(directory)
    assert stats.f_bavail * stats.f_frsize <= (free_pages + 1) * PAGE
    return filler


def remount(mountpoint: Path, mode: str) -> None:
    """Remount ``ro`` or ``rw``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mountpoint)], check=True)
