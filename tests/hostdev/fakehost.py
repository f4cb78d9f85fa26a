"""A host made for the hostdev tests: device nodes made with mknod in a test-owned
directory, and the sysfs and udev entries a real host would have for them.

The nodes reuse the numbers of harmless kernel devices (1:3 null, 1:5 zero, 1:7 full,
1:8 random, 1:9 urandom), so a container given one can open it and nothing on the host
can be hurt. Making nodes needs CAP_MKNOD; tests skip without it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

HARMLESS = ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9))


def can_mknod(directory: Path) -> bool:
    probe = directory / ".mknod-probe"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return False
    probe.unlink()
    return True


@dataclass
class FakeHost:
    root: Path

    def __post_init__(self) -> None:
        self.dev = self.root / "dev"
        self.sys = self.root / "sys"
        self.udev = self.root / "udev"
        for directory in (self.dev, self.sys / "dev" / "char", self.udev):
            directory.mkdir(parents=True, exist_ok=True)
        if not can_mknod(self.dev):
            pytest.skip("making device nodes needs CAP_MKNOD")

    def node(
        self,
        name: str,
        number: tuple[int, int],
        *,
        mode: int = 0o660,
        udev: dict[str, str] | None = None,
        sysfs: str | None = None,
        attributes: dict[str, str] | None = None,
    ) -> Path:
        """A char node ``dev/<name>``; ``sysfs``: its device dir under ``sys/devices``."""
        path = self.dev / name
        major, minor = number
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
        os.chmod(path, mode)
        if udev is not None:
            lines = "".join(f"E:{k}={v}\n" for k, v in udev.items())
            (self.udev / f"c{major}:{minor}").write_text(lines)
        if sysfs is not None:
            directory = self.sys / "devices" / sysfs
            directory.mkdir(parents=True, exist_ok=True)
            for key, value in (attributes or {}).items():
                (directory / key).parent.mkdir(parents=True, exist_ok=True)
                (directory / key).write_text(value + "\n")
            link = self.sys / "dev" / "char" / f"{major}:{minor}"
            if link.is_symlink():
                link.unlink()
            link.symlink_to(os.path.relpath(directory, link.parent))
        return path

    def unplug(self, name: str) -> None:
        (self.dev / name).unlink()

    def config(self, groups: str, *, rescan: float = 30.0) -> str:
        """A configuration file's text: ``groups`` (YAML, indented under ``groups:``)
        with this host's sysfs and udev directories."""
        return (
            f"sysfsRoot: {self.sys}\nudevDataDir: {self.udev}\nrescanSeconds: {rescan}\n"
            f"groups:\n{groups}"
        )
