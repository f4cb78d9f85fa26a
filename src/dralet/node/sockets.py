"""Socket file names: the DRA service socket and the kubelet registration socket, with
the per-instance names of a rolling update kept under the unix path limit.

The names are those of the Go kubelet-plugin helper, so a Go and a dralet build of one
driver hand over to each other in a rolling update
(k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 kubeletplugin/draplugin.go,
``RollingUpdateRegistrarSocketFile`` and ``rollingUpdatePluginSocketFile``): the pod UID
stays readable in the name while the path fits, else a hash of it takes its place.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

__all__ = [
    "UNIX_PATH_MAX",
    "fits",
    "plugin_socket_name",
    "registration_socket_name",
]

UNIX_PATH_MAX = 108
"""``sun_path`` of ``struct sockaddr_un`` on Linux, the terminating NUL included: a path
must be shorter (the helper's ``unixPathMax``)."""
UID_HASH_BYTES = 8
"""SHA-256 bytes of the pod UID kept in a shortened name (``rollingUpdateUIDHashBytes``)."""
DRIVER_UID_HASH_BYTES = 16
"""SHA-256 bytes of driver name, NUL, pod UID in the shortest registration socket name
(``rollingUpdateRegistrarSocketHashBytes``)."""


def fits(path: Path) -> bool:
    """Whether a unix socket may be bound at ``path``."""
    return len(os.fsencode(path)) < UNIX_PATH_MAX


def _hash(text: str, size: int) -> str:
    digest = hashlib.sha256(text.encode()).digest()[:size]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def plugin_socket_name(plugin_dir: Path, pod_uid: str) -> str:
    """The DRA service socket in ``plugin_dir``: ``dra.sock``, or per instance
    ``dra-<uid>.sock``, else ``dra-<hash of uid>`` (no ``.sock``: the helper drops the
    suffix so the longest driver name fits under the default plugin directory)."""
    if not pod_uid:
        return "dra.sock"
    readable = f"dra-{pod_uid}.sock"
    if fits(plugin_dir / readable):
        return readable
    return f"dra-{_hash(pod_uid, UID_HASH_BYTES)}"


def registration_socket_name(registry_dir: Path, driver_name: str, pod_uid: str) -> str:
    """The registration socket in ``registry_dir``: ``<driver>-reg.sock``, or per instance
    the first that fits of ``<driver>-<uid>-reg.sock``, ``<driver>-<hash of uid>-reg.sock``
    and ``dra-<hash of driver NUL uid>-reg.sock`` (the last one even if it does not)."""
    if not pod_uid:
        return f"{driver_name}-reg.sock"
    candidates = (
        f"{driver_name}-{pod_uid}-reg.sock",
        f"{driver_name}-{_hash(pod_uid, UID_HASH_BYTES)}-reg.sock",
        f"dra-{_hash(driver_name + chr(0) + pod_uid, DRIVER_UID_HASH_BYTES)}-reg.sock",
    )
    for name in candidates:
        if fits(registry_dir / name):
            return name
    return candidates[-1]
