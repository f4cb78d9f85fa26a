"""The Kubernetes releases dralet knows, and the one rule for a default version: every
command defaults to the newest release it supports.

1.32 is the floor (resource.k8s.io v1beta1, kubelet DRA gRPC v1beta1); 1.38 is the
newest (released 2026-12-16; its rules are read from k8s.io/kubernetes v1.38.0-beta.0).
A command that supports fewer (``dralet validate`` needs its rules for each release)
names its own subset and still takes its default from ``newest``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KUBERNETES_RELEASES", "newest", "through"]

KUBERNETES_RELEASES = ("1.32", "1.33", "1.34", "1.35", "1.36", "1.37", "1.38")
"""Oldest first: the floor to the current release."""


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


def newest(supported: Iterable[str]) -> str:
    """The default Kubernetes version of a command that supports ``supported``."""
    return max(supported, key=_minor)


def through(last: str) -> tuple[str, ...]:
    """The releases from the floor up to and including ``last``."""
    return tuple(r for r in KUBERNETES_RELEASES if _minor(r) <= _minor(last))
