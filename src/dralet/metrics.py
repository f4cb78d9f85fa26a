"""Prometheus metrics of a dralet driver, in one registry per driver instance.

Every metric is created here so names and labels stay consistent; the node engine,
the API module and the publisher only call the methods. A separate registry per
``DriverMetrics`` keeps tests isolated from each other.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["DriverMetrics"]

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 45)


class DriverMetrics:
    """The metrics one driver process exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.operation_seconds = Histogram(
            "dralet_operation_duration_seconds",
            "Duration of one claim's prepare or unprepare, by result.",
            ["operation", "result"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.operations = Counter(
            "dralet_operations",
            "Claims prepared or unprepared, by result.",
            ["operation", "result"],
            registry=r,
        )
        self.claims_prepared = Gauge(
            "dralet_claims_prepared", "Claims currently recorded as prepared.", registry=r
        )
        self.finalizer_removals_owed = Gauge(
            "dralet_finalizer_removals_owed",
            "Claims unprepared (the kubelet answered) whose finalizer removal is still owed.",
            registry=r,
        )
        self.recovery_actions = Counter(
            "dralet_recovery_actions",
            "Repairs made by recovery at start or by garbage collection, by kind.",
            ["action"],
            registry=r,
        )
        self.stale_claim_cleanups = Counter(
            "dralet_stale_claim_cleanups",
            "Claims unprepared because their ResourceClaim was gone, replaced or moved.",
            registry=r,
        )
        self.slice_publishes = Counter(
            "dralet_resourceslice_writes",
            "ResourceSlice writes, by verb (create, update, delete).",
            ["verb"],
            registry=r,
        )
        self.api_retries = Counter(
            "dralet_api_retries",
            "Kubernetes API requests retried, by reason.",
            ["reason"],
            registry=r,
        )
        self.device_status_writes = Counter(
            "dralet_claim_device_status_writes",
            "Writes of claims' status.devices entries, by result (ok, failed, refused: a "
            "backend's status the API server would not take).",
            ["result"],
            registry=r,
        )
        self.checkpoint_errors = Counter(
            "dralet_checkpoint_errors",
            "Checkpoint files found unusable (the driver then fails closed).",
            ["reason"],
            registry=r,
        )
        self.store_commits = Counter(
            "dralet_store_commits",
            "Durable commits of the claim record store (each one fsync of its log).",
            registry=r,
        )
        self.store_commit_seconds = Histogram(
            "dralet_store_commit_seconds",
            "Time one commit of the claim record store took, its fsync included.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self._operation_children: dict[tuple[str, str], tuple[Histogram, Counter]] = {}

    def operation_done(self, operation: str, result: str, seconds: float) -> None:
        """One claim's prepare or unprepare ended with ``result`` after ``seconds`` (the
        labelled children are looked up once, not per claim)."""
        children = self._operation_children.get((operation, result))
        if children is None:
            children = (
                self.operation_seconds.labels(operation, result),
                self.operations.labels(operation, result),
            )
            self._operation_children[(operation, result)] = children
        children[0].observe(seconds)
        children[1].inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
