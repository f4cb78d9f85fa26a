"""Every tunable of a driver process, in one frozen settings value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dralet import kubenames
from dralet.node import sockets

__all__ = ["DriverSettings"]

KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
_API_VERSION = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")


@dataclass(frozen=True)
class DriverSettings:
    """The node side of a driver: names, paths, sockets, ports, timeouts, concurrency."""

    driver_name: str
    """The DRA driver name; equals the ``driver`` of the claims' allocation results."""
    node_name: str
    """The node this driver runs on."""
    plugin_dir: Path = field(default=Path())
    """Plugin data dir: DRA socket, checkpoint, locks (``/var/lib/kubelet/plugins/<driver>``)."""
    registry_dir: Path = KUBELET_REGISTRY_DIR
    """Where the kubelet watches for registration sockets."""
    cdi_dir: Path = Path("/var/run/cdi")
    """Where per-claim CDI spec files go (read by the container runtime)."""
    cdi_class: str = "claim"
    """Class part of the CDI kind ``<driver>/<class>``; device names embed the claim UID."""
    cdi_kind: str = field(init=False, default="")
    """``<driver>/<class>``, set from the two (every claim's spec and CDI names carry it)."""
    pool_name: str = ""
    """ResourceSlice pool of this node's devices (default: the node name)."""
    pod_uid: str = ""
    """When set, sockets get per-instance names (rolling updates, Kubernetes >= 1.33),
    shortened as the Go helper shortens them when a path would not fit
    (``dralet.node.sockets``)."""
    boot_id_path: Path = Path("/proc/sys/kernel/random/boot_id")
    """Source of the boot ID recorded in the checkpoint to detect reboots."""
    max_parallel_claims: int = 256
    """Claims processed concurrently, shared fairly by every call in flight. A prepare
    call's claims go through the steps in groups of up to this many, each step of a group
    one durable commit: larger groups make fewer commits (a 1,000-claim call took about
    a tenth less time at 256 than at 64), smaller ones let a one-claim call in sooner.
    Reads, finalizer patches and backend calls keep their own, lower limits."""
    max_parallel_api_calls: int = 16
    """Kubernetes API requests (claim reads, finalizer patches) in flight at once."""
    max_parallel_backend_calls: int = 16
    """Backend ``prepare``/``release`` calls in flight at once (and an async backend's
    ``survives_reboot`` checks after a reboot)."""
    backend_call_timeout: float = 30.0
    """Seconds one backend call (``prepare_claim``, ``release_claim``, ``devices`` …) may
    take; a call past it fails its claim with a retryable error and is rolled back. 0: no
    limit. Below ``call_budget`` so the kubelet gets the claim's error in time."""
    recovery_retry: float = 1.0
    """First delay (s) before a claim whose recovery failed (disk full, read-only) is
    retried; it doubles up to a minute."""
    call_budget: float = 40.0
    """Seconds a prepare/unprepare call may take: claims not finished by then are answered
    with a retryable per-claim error, inside the kubelet's 45 s deadline."""
    shutdown_grace: float = 10.0
    """Seconds in-flight calls get to finish after SIGTERM before they are cancelled."""
    stale_claim_grace: float = 300.0
    """Seconds a claim must look stale (gone, replaced, moved) before it is unprepared."""
    stale_claim_interval: float = 60.0
    """Seconds between stale-claim cleanup passes."""
    health_interval: float = 5.0
    """Seconds between backend health polls for the DRA resource health stream."""
    health_port: int | None = None
    """TCP port for the gRPC health service (liveness probes); None disables it."""
    metrics_port: int | None = None
    """TCP port for Prometheus metrics; None disables it."""
    metrics_host: str = "0.0.0.0"  # noqa: S104 - a DaemonSet exposes metrics on the pod IP
    """Address the metrics and health servers bind to."""
    write_device_status: bool = False
    """Write each prepared device's entry of the claim's ``status.devices`` (conditions,
    data, network data: ``PreparedDevice.status``) and remove it at unprepare. Best
    effort: a failed write is logged and counted, never fails the claim. Needs RBAC on
    ``resourceclaims/status`` (and, from Kubernetes 1.36, ``resourceclaims/driver``)."""
    device_metadata: bool = False
    """Write a device metadata file per request of each prepared claim and mount it
    read-only into the containers that get the request's devices (KEP-5304, beta in the
    1.37 kubelet plugin helper), at ``/var/run/kubernetes.io/dra-device-attributes/...``.
    The files live under ``<plugin_dir>/dra-device-metadata`` and go at unprepare, right
    after the CDI spec."""
    device_metadata_versions: tuple[str, ...] = ("v1beta1", "v1alpha1")
    """The ``metadata.resource.k8s.io`` versions each metadata file holds, newest first
    (readers take the first they know). They share one set of fields, so a newer version
    (``v1``) is added here, with no code change, once readers know it."""
    backend_state_dir: Path | None = None
    """The backend's own state dir, if any: checked at start and swept of temp files
    ``dralet.atomic_write`` left behind."""
    remove_plugin_dir_when_unused: bool = False
    """At a clean stop, remove the plugin dir (with the backend state dir in it) when it
    holds no claim record and no other instance runs in it, so an uninstalled driver
    leaves no directory on the node. Never while a claim is held: a reinstalled driver
    must find its records."""

    def __post_init__(self) -> None:
        driver_problem = kubenames.driver_name_problem(self.driver_name)
        if driver_problem is not None:
            raise ValueError(f"DriverSettings.driver_name {self.driver_name!r}: {driver_problem}")
        node_problem = (
            kubenames.dns_subdomain_problem(self.node_name)
            if self.node_name
            else "must not be empty"
        )
        if node_problem is not None:
            raise ValueError(f"DriverSettings.node_name {self.node_name!r}: {node_problem}")
        versions = self.device_metadata_versions
        bad = [v for v in versions if _API_VERSION.fullmatch(v) is None]
        if not versions or bad or len(set(versions)) != len(versions):
            raise ValueError(
                f"DriverSettings.device_metadata_versions {versions!r}: give distinct API "
                "versions such as 'v1beta1', newest first"
            )
        if self.plugin_dir == Path():
            object.__setattr__(self, "plugin_dir", KUBELET_PLUGINS_DIR / self.driver_name)
        if not self.pool_name:
            object.__setattr__(self, "pool_name", self.node_name)
        # The kubelet dials the endpoint we advertise: it must be an absolute path.
        for name in ("plugin_dir", "registry_dir", "cdi_dir"):
            object.__setattr__(self, name, getattr(self, name).absolute())
        if self.backend_state_dir is not None:
            object.__setattr__(self, "backend_state_dir", self.backend_state_dir.absolute())
        object.__setattr__(self, "cdi_kind", f"{self.driver_name}/{self.cdi_class}")

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / sockets.plugin_socket_name(self.plugin_dir, self.pod_uid)

    @property
    def registration_socket(self) -> Path:
        name = sockets.registration_socket_name(self.registry_dir, self.driver_name, self.pod_uid)
        return self.registry_dir / name

    @property
    def checkpoint_path(self) -> Path:
        """The single-file checkpoint of releases before the record database; read once
        on upgrade and renamed ``*.migrated``."""
        return self.plugin_dir / "checkpoint.json"

    @property
    def store_path(self) -> Path:
        """The claim record database (SQLite, WAL mode)."""
        return self.plugin_dir / "claims.db"

    @property
    def claim_lock_path(self) -> Path:
        """One file whose byte-range locks serialise each claim across driver instances."""
        return self.plugin_dir / "claims.lock"
