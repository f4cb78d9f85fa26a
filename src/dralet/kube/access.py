"""Where the Kubernetes API is, resolved the way kubectl resolves it.

Order: an explicit ``--api-url`` (no auth; the API stand-in), ``--kubeconfig``, then
``$KUBECONFIG`` (a ``:``-separated list, merged), then the pod's service account
(in-cluster), then ``~/.kube/config``. Pure: the environment and the file system are
passed in, so every command resolves access the same way and tests need no patching.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dralet import errors

__all__ = ["ApiAccess", "ApiAccessError", "resolve"]

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
"""Set in every pod by the kubelet; its presence means a service account token is mounted."""
KUBECONFIG_ENV = "KUBECONFIG"


class ApiAccessError(errors.InvalidRequestError):
    """The API access that was asked for cannot be used (a missing kubeconfig, say)."""


@dataclass(frozen=True)
class ApiAccess:
    """How to reach the API server, and which rule chose it (for the log line)."""

    kind: Literal["url", "kubeconfig", "in-cluster"]
    source: str
    """``--api-url``, ``--kubeconfig``, ``$KUBECONFIG``, ``in-cluster`` or ``~/.kube/config``."""
    url: str | None = None
    kubeconfig: str | None = None
    """One path, or several joined with ``os.pathsep`` (merged like kubectl does)."""
    context: str | None = None

    def describe(self) -> str:
        where = self.url or self.kubeconfig or "the pod's service account"
        context = f", context {self.context}" if self.context else ""
        return f"{where} (from {self.source}{context})"


def resolve(
    *,
    url: str | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    is_file: Callable[[Path], bool] = Path.is_file,
) -> ApiAccess | None:
    """The API access to use, or None when nothing points at a cluster.

    Raises ``ApiAccessError`` when a kubeconfig was named (flag or ``$KUBECONFIG``) but
    no such file exists: a typo must not silently fall through to another cluster.
    """
    env = os.environ if environ is None else environ
    if url is not None:
        return ApiAccess(kind="url", source="--api-url", url=url)
    if kubeconfig is not None:
        if not is_file(kubeconfig):
            raise ApiAccessError(f"--kubeconfig {kubeconfig}: no such file")
        return ApiAccess(
            kind="kubeconfig", source="--kubeconfig", kubeconfig=str(kubeconfig), context=context
        )
    listed = [Path(p) for p in env.get(KUBECONFIG_ENV, "").split(os.pathsep) if p]
    if listed:
        present = [str(p) for p in listed if is_file(p)]
        if not present:
            raise ApiAccessError(f"$KUBECONFIG names no existing file: {env[KUBECONFIG_ENV]}")
        return ApiAccess(
            kind="kubeconfig",
            source="$KUBECONFIG",
            kubeconfig=os.pathsep.join(present),
            context=context,
        )
    if in_cluster or env.get(IN_CLUSTER_ENV):
        return ApiAccess(kind="in-cluster", source="in-cluster")
    default = (home if home is not None else Path.home()) / ".kube" / "config"
    if is_file(default):
        return ApiAccess(
            kind="kubeconfig", source="~/.kube/config", kubeconfig=str(default), context=context
        )
    return None
