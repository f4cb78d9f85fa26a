"""The ``DT_SONAME`` of a shared library: the name the dynamic loader (and ``libcuda``'s
own ``dlopen`` calls) look the library up by, as ``ldconfig`` reads it.

Only 64-bit little-endian ELF files are read (the x86-64 and arm64 driver libraries).
Reads are bounded and go through one descriptor opened without following symlinks;
anything unexpected gives None, never an exception.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

__all__ = ["soname"]

_MAGIC = b"\x7fELF"
_CLASS_64 = 2
_LITTLE_ENDIAN = 1
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
_DYNAMIC_ENTRY = struct.Struct("<qQ")
_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_STRTAB = 5
_DT_SONAME = 14
_MAX_PROGRAM_HEADERS = 256
_MAX_DYNAMIC_BYTES = 64 * 1024
_MAX_NAME = 255
_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*\.so(\.[0-9A-Za-z_-]+)*")


def soname(path: Path) -> str | None:
    """The library's ``DT_SONAME`` (``libcuda.so.1``), or None when the file is not a
    64-bit little-endian shared library that names one, or the name is no plain file
    name."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        name = _read_soname(fd)
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)
    if name is None or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        return None
    return name


def _read_soname(fd: int) -> str | None:
    header = os.pread(fd, _HEADER.size, 0)
    ident, _, _, _, _, phoff, _, _, _, phentsize, phnum, *_ = _HEADER.unpack(header)
    if ident[:4] != _MAGIC or ident[4] != _CLASS_64 or ident[5] != _LITTLE_ENDIAN:
        return None
    if phentsize != _PROGRAM_HEADER.size or not 0 < phnum <= _MAX_PROGRAM_HEADERS:
        return None
    table = os.pread(fd, phentsize * phnum, phoff)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = _PROGRAM_HEADER.unpack_from(
            table, index * phentsize
        )
        if kind == _PT_LOAD:
            loads.append((vaddr, filesz, offset))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, min(filesz, _MAX_DYNAMIC_BYTES))
    if dynamic is None:
        return None
    entries = os.pread(fd, dynamic[1], dynamic[0])
    strtab = soname_offset = None
    for start in range(0, len(entries) - _DYNAMIC_ENTRY.size + 1, _DYNAMIC_ENTRY.size):
        tag, value = _DYNAMIC_ENTRY.unpack_from(entries, start)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_SONAME:
            soname_offset = value
    if strtab is None or soname_offset is None:
        return None
    # DT_STRTAB is an address: the file offset is found through the segment loading it.
    for vaddr, filesz, offset in loads:
        if vaddr <= strtab < vaddr + filesz:
            raw = os.pread(fd, _MAX_NAME + 1, offset + (strtab - vaddr) + soname_offset)
            end = raw.find(b"\0")
            return raw[:end].decode("ascii") if end > 0 else None
    return None
