"""The settings of a whole driver process, composed of the parts each piece reads.

``Settings`` is the one value ``dralet.run`` and ``dralet.Driver`` take and ``dralet run``
builds from its flags: ``driver`` (node, paths, sockets, ports, timeouts, concurrency:
what the claim engine and the gRPC servers read), ``api`` (where the Kubernetes API is
and how the client talks to it) and ``publishing`` (the ResourceSlice publisher). Every
default lives on these dataclasses; the command line reads them from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dralet.kube import access
from dralet.kube.settings import KubeSettings
from dralet.node.publisher import PublisherSettings
from dralet.node.settings import DriverSettings

__all__ = ["BACKEND_STATE_SUBDIR", "ApiSettings", "Settings"]

BACKEND_STATE_SUBDIR = "backend"
"""The backend's state dir when none is given: ``<plugin_dir>/backend``."""


@dataclass(frozen=True)
class ApiSettings:
    """Where the Kubernetes API is. Resolved when the driver starts, the way kubectl
    resolves it: ``url``, ``kubeconfig``, ``$KUBECONFIG``, the pod's service account
    (``in_cluster`` or ``$KUBERNETES_SERVICE_HOST``), then ``~/.kube/config``."""

    url: str | None = None
    """An API server URL used without authentication (the API stand-in of tests)."""
    kubeconfig: Path | None = None
    """A kubeconfig file; a path that does not exist is an error, never a fallback."""
    context: str | None = None
    """The kubeconfig context to use (default: the file's current context)."""
    in_cluster: bool = False
    """Use the pod's service account even where a kubeconfig is found."""
    standalone: bool = False
    """Run with no API at all: claims cannot be read (so every prepare fails unless the
    driver is given its own claim source), nothing is published, no finalizer is set.
    For socket-level tests only; it conflicts with ``url``, ``kubeconfig`` and
    ``in_cluster``."""
    client: KubeSettings = field(default_factory=KubeSettings)
    """Timeouts and retries of every API request and watch."""

    def resolve(self, environ: Mapping[str, str] | None = None) -> access.ApiAccess | None:
        """The API access to use; None only when ``standalone``.

        Raises ``access.ApiAccessError`` (one line) when a named kubeconfig is missing,
        when nothing points at a cluster, or when ``standalone`` conflicts with a setting.
        """
        if self.standalone:
            given = [
                name
                for name, value in (
                    ("url", self.url),
                    ("kubeconfig", self.kubeconfig),
                    ("in_cluster", self.in_cluster or None),
                )
                if value is not None
            ]
            if given:
                raise access.ApiAccessError(
                    f"standalone conflicts with the API access given by {', '.join(given)}"
                )
            return None
        api = access.resolve(
            url=self.url,
            kubeconfig=self.kubeconfig,
            context=self.context,
            in_cluster=self.in_cluster,
            environ=environ,
        )
        if api is None:
            raise access.ApiAccessError(
                "no Kubernetes API configured: give --kubeconfig, set $KUBECONFIG, run in a "
                "pod, or create ~/.kube/config (--standalone runs without one, for socket "
                "tests only)"
            )
        return api


@dataclass(frozen=True)
class Settings:
    """Everything a driver process is told, in one frozen value.

    ``driver.backend_state_dir`` defaults to ``<plugin_dir>/backend``: the directory the
    backend keeps its own durable records in, checked and swept of temp files at start.
    """

    driver: DriverSettings
    """Node, driver name, paths, sockets, health/metrics ports, timeouts, concurrency."""
    api: ApiSettings = field(default_factory=ApiSettings)
    """The Kubernetes API: where it is, and the client's timeouts and retries."""
    publish: bool = True
    """Publish this node's devices as ResourceSlices (needs the API)."""
    publishing: PublisherSettings = field(default_factory=PublisherSettings)
    """How the publisher keeps the pool published: resync, backoff, feature gates, taints."""

    def __post_init__(self) -> None:
        if self.driver.backend_state_dir is None:
            state_dir = self.driver.plugin_dir / BACKEND_STATE_SUBDIR
            driver = dataclasses.replace(self.driver, backend_state_dir=state_dir)
            object.__setattr__(self, "driver", driver)

    @property
    def state_dir(self) -> Path:
        """The backend's own state dir (``driver.backend_state_dir``)."""
        assert self.driver.backend_state_dir is not None  # set by __post_init__
        return self.driver.backend_state_dir
