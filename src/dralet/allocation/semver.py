"""Strict semantic versions (semver 2.0.0) for the CEL ``semver()`` library and attributes.

Owns parsing and precedence. Strict parsing, as attributes and one-argument ``semver()``
use it, accepts no ``v`` prefix and no missing minor or patch numbers; ``normalize`` is
the lenient spelling two-argument ``semver(text, true)`` accepts (CEL semver library
version 1, Kubernetes 1.33+; k8s.io/apiserver v0.37.2 pkg/cel/library/semverlib.go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["SemverError", "Version", "compare_versions", "normalize", "parse_version"]

_SEMVER = re.compile(
    r"(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
_PARSE_CACHE_SIZE = 1024


class SemverError(ValueError):
    """The text is not a strict semantic version."""


@dataclass(frozen=True)
class Version:
    """A parsed version; build metadata is kept but never compared."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: str


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def parse_version(text: str) -> Version:
    """The version spelled by ``text``; raises ``SemverError`` when it is not strict semver."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise SemverError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    pre = match["pre"]
    return Version(
        major=int(match["major"]),
        minor=int(match["minor"]),
        patch=int(match["patch"]),
        prerelease=tuple(pre.split(".")) if pre else (),
        build=match["build"] or "",
    )


def normalize(text: str) -> str:
    """``text`` without a ``v`` prefix, leading zeros or missing minor/patch numbers, as
    the strict form; raises ``SemverError`` for a short version with prerelease or build."""
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or not trimmed[0].isdigit():
                trimmed = "0" + trimmed
            parts[index] = trimmed
    if len(parts) < 3:
        if any(mark in parts[-1] for mark in "+-"):
            raise SemverError(f"{text!r}: a short version cannot carry prerelease or build data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _compare_identifiers(left: str, right: str) -> int:
    left_numeric, right_numeric = left.isdigit(), right.isdigit()
    if left_numeric and right_numeric:
        return (int(left) > int(right)) - (int(left) < int(right))
    if left_numeric != right_numeric:
        return -1 if left_numeric else 1
    return (left > right) - (left < right)


def compare_versions(left: Version, right: Version) -> int:
    """-1, 0 or 1 by semver precedence (prerelease sorts before the release)."""
    core_left = (left.major, left.minor, left.patch)
    core_right = (right.major, right.minor, right.patch)
    if core_left != core_right:
        return -1 if core_left < core_right else 1
    if not left.prerelease or not right.prerelease:
        return (not left.prerelease) - (not right.prerelease)
    for a, b in zip(left.prerelease, right.prerelease, strict=False):
        order = _compare_identifiers(a, b)
        if order:
            return order
    return (len(left.prerelease) > len(right.prerelease)) - (
        len(left.prerelease) < len(right.prerelease)
    )
