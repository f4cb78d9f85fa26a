"""The pieces every path of the claim engine works with, built once per driver.

The records (``store``), the CDI specs and device metadata files, the calls out of the
process, the observer, the three routes (``prepares``, ``teardowns``, ``repairs``) and
the node's mode. The RPC paths (``engine``) and the node-wide work (``nodewide``) both
work on one ``Parts``; neither reaches into the other.
"""

from __future__ import annotations

import logging

from dralet import errors
from dralet.cdi import store as cdi_store
from dralet.metrics import DriverMetrics
from dralet.node.backend import ClaimBackend
from dralet.node.claims import devicemetadata
from dralet.node.claims.calls import (
    Calls,
    ClaimSource,
    DeviceStatusWriter,
    Invoker,
    NoClaimSource,
    finalizer_name,
    normalize,
)
from dralet.node.claims.findings import lost_store_hint, read_boot_id
from dralet.node.claims.group import RouteParts
from dralet.node.claims.plan import Mode, Observer
from dralet.node.claims.prepare import Prepare
from dralet.node.claims.repairs import Repairs
from dralet.node.claims.store import RecordStore, SpecWriter
from dralet.node.claims.teardown import OwedRemovals, Teardown
from dralet.node.settings import DriverSettings
from dralet.tasks import TaskSet

__all__ = ["Parts"]

log = logging.getLogger("dralet.node.claims")


class Parts:
    """The parts, built from the settings, the backend and the claim source."""

    def __init__(
        self,
        settings: DriverSettings,
        *,
        backend: ClaimBackend | Invoker,
        claims: ClaimSource | None,
        metrics: DriverMetrics | None = None,
    ) -> None:
        self.settings = settings
        if (
            settings.write_device_status
            and claims is not None
            and not isinstance(claims, DeviceStatusWriter)
        ):
            raise ValueError(
                f"write_device_status: {type(claims).__name__} cannot write claim status "
                "(it has no apply_device_status)"
            )
        self.metrics = metrics or DriverMetrics()
        self.store = RecordStore(settings, boot_id=read_boot_id(settings), metrics=self.metrics)
        self.metrics.claims_prepared.set_function(self.store.count_prepared)
        self.metrics.finalizer_removals_owed.set_function(self.store.count_released)
        self.specs = cdi_store.SpecStore(settings.cdi_dir, settings.cdi_kind)
        self.calls = Calls(
            normalize(backend, timeout=settings.backend_call_timeout),
            claims or NoClaimSource(),
            finalizer=finalizer_name(settings.driver_name),
            api_limit=settings.max_parallel_api_calls,
            backend_limit=settings.max_parallel_backend_calls,
        )
        self.spec_io = SpecWriter(self.specs)
        self.metadata_files = devicemetadata.MetadataFiles(settings.plugin_dir)
        route = RouteParts(
            settings, self.store, self.spec_io, self.metadata_files, self.calls, self.metrics
        )
        self.teardowns = Teardown(route)
        self.prepares = Prepare(route, teardown=self.teardowns)
        self.repairs = Repairs(route, specs=self.specs, teardown=self.teardowns)
        self.mode = Mode()
        self.work = TaskSet("claims")
        self.owed = OwedRemovals(self.teardowns, self.work)
        self.observer = Observer(
            self.store,
            self.specs,
            self.metadata_files,
            self.work,
            mode=self.mode,
            corrupt=self.enter_fail_closed,
        )
        self.stale_since: dict[str, float] = {}
        """Claim UID → when it was first seen stale: it is cleaned up only once it has
        looked stale for ``stale_claim_grace`` seconds (the kubelet normally unprepares it
        first)."""
        self.pending_recovery: set[str] = set()
        """Claims whose recovery step failed (disk full, read-only); retried with backoff."""

    @property
    def backend(self) -> Invoker:
        """The backend as the engine calls it (through its ``Invoker``)."""
        return self.calls.backend

    @backend.setter
    def backend(self, backend: ClaimBackend | Invoker) -> None:
        self.calls.backend = backend

    @property
    def fail_closed(self) -> str:
        """Why the node fails closed ('' while it serves)."""
        return self.mode.fail_closed

    def enter_fail_closed(self, exc: errors.CheckpointCorruptError) -> None:
        """Stop trusting the store (found unusable while running); keep a copy."""
        if self.mode.fail_closed:
            return
        kept = self.store.keep_aside(exc.path)
        reason = f"{exc} (copy kept at {kept})" if kept else str(exc)
        self.mode.fail_closed = f"{reason}; {lost_store_hint(len(self.specs.scan()))}"
        self.metrics.checkpoint_errors.labels("corrupt").inc()
        log.error("claim store unusable, failing closed: %s", self.mode.fail_closed)
