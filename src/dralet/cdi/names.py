"""Qualified CDI device names, ``vendor/class=name``, validated as the CDI spec says.

The rules are those of the CDI library's parser, plus two it lacks and runtimes need:
one-character vendor or class names are refused (released CDI libraries panic on
them), and the spec's length limits (kind name segment at most 63, vendor a DNS-style
prefix of at most 253) are enforced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CDINameError",
    "QualifiedName",
    "parse_qualified_name",
    "qualified_name",
    "validate_class",
    "validate_device_name",
    "validate_kind",
    "validate_vendor",
]

VENDOR_MAX_LENGTH = 253
CLASS_MAX_LENGTH = 63

_VENDOR_RE = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_CLASS_RE = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


class CDINameError(ValueError):
    """A vendor, class, kind or device name breaks the CDI naming rules."""


@dataclass(frozen=True)
class QualifiedName:
    vendor: str
    cdi_class: str
    name: str

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.cdi_class}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.cdi_class}={self.name}"


def _validate_segment(what: str, value: str, pattern: re.Pattern[str], max_len: int) -> None:
    if not value:
        raise CDINameError(f"invalid (empty) {what} name")
    if len(value) < 2 and what in ("vendor", "class"):
        raise CDINameError(
            f"invalid {what} {value!r}: must be at least 2 characters "
            "(CDI libraries up to v1.1.0 crash on 1-character names)"
        )
    if len(value) > max_len:
        raise CDINameError(f"invalid {what} {value!r}: longer than {max_len} characters")
    if pattern.fullmatch(value) is None:
        if not value[0].isascii() or not (
            value[0].isalpha() or (what == "device" and value[0].isdigit())
        ):
            start = "a letter or digit" if what == "device" else "a letter"
            raise CDINameError(f"invalid {what} {value!r}: should start with {start}")
        if not (value[-1].isascii() and value[-1].isalnum()):
            raise CDINameError(f"invalid {what} {value!r}: should end with a letter or digit")
        allowed = "letters, digits, '_', '-', '.'" + (", ':'" if what == "device" else "")
        bad = next(c for c in value if pattern.fullmatch("a" + c + "a") is None)
        raise CDINameError(f"invalid character {bad!r} in {what} {value!r}: allowed are {allowed}")


def validate_vendor(vendor: str) -> None:
    _validate_segment("vendor", vendor, _VENDOR_RE, VENDOR_MAX_LENGTH)


def validate_class(cdi_class: str) -> None:
    _validate_segment("class", cdi_class, _CLASS_RE, CLASS_MAX_LENGTH)


def validate_device_name(name: str) -> None:
    _validate_segment("device", name, _DEVICE_RE, 2**31)


def validate_kind(kind: str) -> tuple[str, str]:
    """Validate ``vendor/class``; returns its two parts."""
    vendor, sep, cdi_class = kind.partition("/")
    if not sep:
        raise CDINameError(f"invalid kind {kind!r}: expected vendor/class")
    validate_vendor(vendor)
    validate_class(cdi_class)
    return vendor, cdi_class


def qualified_name(kind: str, name: str) -> str:
    """``vendor/class=name``, after validating every part."""
    validate_kind(kind)
    validate_device_name(name)
    return f"{kind}={name}"


def parse_qualified_name(device: str) -> QualifiedName:
    """Split and validate a fully qualified CDI device name."""
    if not device or device.startswith("/"):
        raise CDINameError(f"{device!r} is not a qualified CDI device name (vendor/class=name)")
    kind, sep, name = device.partition("=")
    if not sep:
        raise CDINameError(f"{device!r} is not a qualified CDI device name: missing '='")
    vendor, cdi_class = validate_kind(kind)
    validate_device_name(name)
    return QualifiedName(vendor, cdi_class, name)
