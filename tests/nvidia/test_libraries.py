"""The driver's libraries under the names they are loaded by: each file's own soname
(``DT_SONAME``, read from its ELF dynamic section), as ``libcuda``'s ``dlopen`` of
``libnvidia-ptxjitcompiler.so.1`` and ``libnvidia-nvvm.so.4`` asks for them."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from dralet.drivers.nvidia import elf, libraries

VERSION = "580.159.04"
BASE = 0x400000


def shared_object(soname: str | None, *, word: int = 2, endian: int = 1) -> bytes:
    """A minimal ELF shared object: one loadable segment holding a dynamic section whose
    string table names ``soname`` (none when None)."""
    strings = b"\0" + (soname.encode() + b"\0" if soname else b"")
    header_size, program_size = 64, 56
    dynamic_offset = header_size + 2 * program_size
    entries = [(5, 0), *([(14, 1)] if soname else []), (0, 0)]
    strtab_offset = dynamic_offset + 16 * len(entries)
    entries[0] = (5, BASE + strtab_offset)
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    size = strtab_offset + len(strings)
    ident = b"\x7fELF" + bytes([word, endian, 1]) + bytes(9)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, header_size, 0, 0, header_size,
        program_size, 2, 0, 0, 0,
    )  # fmt: skip
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)
    dynamic_header = struct.pack(
        "<IIQQQQQQ", 2, 6, dynamic_offset, BASE + dynamic_offset, BASE + dynamic_offset,
        len(dynamic), len(dynamic), 8,
    )  # fmt: skip
    return header + load + dynamic_header + dynamic + strings


def test_the_soname_is_read_from_the_dynamic_section(tmp_path: Path) -> None:
    library = tmp_path / f"libnvidia-nvvm.so.{VERSION}"
    library.write_bytes(shared_object("libnvidia-nvvm.so.4"))
    assert elf.soname(library) == "libnvidia-nvvm.so.4"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (shared_object(None), "no DT_SONAME"),
        (shared_object("libcuda.so.1", word=1), "32-bit"),
        (shared_object("libcuda.so.1", endian=2), "big-endian"),
        (shared_object("../../etc/passwd"), "a path, not a file name"),
        (shared_object("libcuda.so.1")[:100], "cut short"),
        (b"libcuda.so.1 text\n", "not ELF"),
        (b"", "empty"),
    ],
)
def test_anything_else_has_no_soname(tmp_path: Path, content: bytes, why: str) -> None:
    library = tmp_path / "libcuda.so.1"
    library.write_bytes(content)
    assert elf.soname(library) is None, why


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real.so").write_bytes(shared_object("libcuda.so.1"))
    (tmp_path / "libcuda.so.1").symlink_to("real.so")
    assert elf.soname(tmp_path / "libcuda.so.1") is None
    assert elf.soname(tmp_path / "missing.so") is None


def test_a_system_library_has_the_soname_readelf_shows() -> None:
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.skip("no x86-64 glibc here")
    assert elf.soname(Path(os.path.realpath(libc))) == "libc.so.6"


def test_each_library_is_mounted_under_its_own_soname(tmp_path: Path) -> None:
    """Sonames as driver 580.159.04 names them: most are ``.1``, ``libnvidia-nvvm`` is
    ``.4`` and ``libnvidia-gpucomp`` carries the driver's version."""
    lib = tmp_path / "usr" / "lib64"
    lib.mkdir(parents=True)
    sonames = {
        "libcuda.so": "libcuda.so.1",
        "libnvidia-ml.so": "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
        "libnvidia-gpucomp.so": f"libnvidia-gpucomp.so.{VERSION}",
    }
    for name, soname in sonames.items():
        (lib / f"{name}.{VERSION}").write_bytes(shared_object(soname))
    found = libraries.find(tmp_path, Path("/host"), VERSION)
    mounted = {m.container_path.rsplit("/", 1)[1] for m in found.mounts}
    assert mounted == {f"{name}.{VERSION}" for name in sonames} | set(sonames.values())
    assert {m.host_path for m in found.mounts} == {
        f"/host/usr/lib64/{name}.{VERSION}" for name in sonames
    }


def test_a_file_whose_soname_cannot_be_read_gets_the_known_one(tmp_path: Path) -> None:
    lib = tmp_path / "lib64"
    lib.mkdir()
    (lib / f"libnvidia-nvvm.so.{VERSION}").write_text("not an ELF file\n")
    (lib / f"libcuda.so.{VERSION}").write_bytes(shared_object("libnvidia-ml.so.1"))
    found = libraries.find(tmp_path, tmp_path, VERSION)
    mounted = {m.container_path.rsplit("/", 1)[1] for m in found.mounts}
    # libcuda's file naming another library's soname is not believed either.
    assert mounted == {
        f"libcuda.so.{VERSION}", "libcuda.so.1", f"libnvidia-nvvm.so.{VERSION}",
        "libnvidia-nvvm.so.4",
    }  # fmt: skip


def test_the_files_own_soname_wins_over_the_known_one(tmp_path: Path) -> None:
    """A later driver may bump a soname (``libnvidia-nvvm.so.5``): the file says so."""
    lib = tmp_path / "lib64"
    lib.mkdir()
    (lib / f"libnvidia-nvvm.so.{VERSION}").write_bytes(shared_object("libnvidia-nvvm.so.5"))
    found = libraries.find(tmp_path, tmp_path, VERSION)
    mounted = {m.container_path.rsplit("/", 1)[1] for m in found.mounts}
    assert mounted == {f"libnvidia-nvvm.so.{VERSION}", "libnvidia-nvvm.so.5"}
