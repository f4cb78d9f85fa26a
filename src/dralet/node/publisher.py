"""The ResourceSlice publisher: this node's devices, kept published in the API server.

From the backend's devices it builds the desired slices of the node's pool (pure:
``dralet.node.published.build_pool``, then ``dralet.kube.slices.plan_pool`` for the
diff), compares them with the live slices of this node and driver, and writes only
the difference: slices the kubelet deleted (it deletes all of its node's slices when it
starts) are re-created, a change of devices publishes the pool at a new generation, and
nothing is written when nothing changed. ``run()`` follows the slices with a watch and
reconciles on every change that is not its own write, on ``trigger()``, on a change of
device health (health taints) and every ``resync_period``. Its reconciles read the live
slices from what that watch delivered (and this publisher wrote since), so an idle
driver sends no request at all. A reconcile lists them from the API server only while
no watch has delivered its list (at start, after the watch failed) and after a write of
its own was refused as stale (409, 404); a watch that reconnects resumes from its last
resourceVersion, or lists again, so it misses no change.

Start it as a named background task with ``start()`` (or spawn ``run()`` yourself) and
stop it with ``stop()``; cancellation is always re-raised and no task outlives it.

``SlicePublisher`` is over 300 lines on purpose: the watch, the reconcile and the writes
share one view of the live slices (what the watch delivered and its own writes since),
and kept in one class that view has one owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from dralet import errors
from dralet.kube import features, resources, shapes, slices, status, versions, watching
from dralet.kube.events import NodeEvents
from dralet.kube.inventory import slice_field_selector
from dralet.metrics import DriverMetrics
from dralet.node import devices, published
from dralet.node.backend import ClaimBackend, HealthStatus
from dralet.node.claims.calls import Invoker, normalize

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["PublisherSettings", "SlicePublisher"]

_REPLACED_SPEC_FIELDS = (
    "devices",
    "sharedCounters",
    "nodeName",
    "nodeSelector",
    "allNodes",
    "perDeviceNodeSelection",
)
"""ResourceSliceSpec fields a slice update replaces as a whole (k8s.io/api v0.37.2
resource/v1 types.go; driver and pool are always written)."""

log = logging.getLogger(__name__)

_API_FAILURES = (status.ApiError, aiohttp.ClientError, TimeoutError, errors.TemporaryError)


@dataclass(frozen=True)
class PublisherSettings:
    """How the publisher keeps the pool published. Times are in seconds."""

    resync_period: float = 30.0
    """Longest time between two reconciles when nothing happens (devices are re-read)."""
    backoff: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
    """Waits after consecutive failed reconciles; the last one repeats."""
    conflict_retries: int = 3
    """Immediate re-reads and retries of a reconcile whose write hit a 409 Conflict (or a
    404: the slice went away since it was listed)."""
    task_name: str = "dralet-publisher"
    """Name prefix of the background tasks (the watch task adds ``:watch``)."""
    feature_gates: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    """DRA feature gates the cluster sets differently from its release's default (e.g.
    ``{"DRADeviceTaints": True}`` on a 1.35 cluster that enables the alpha gate); they
    decide which optional device fields are published."""
    unhealthy_taint_effect: devices.TaintEffect | None = "NoSchedule"
    """Effect of the ``<driver>/unhealthy`` taint put on a device the backend reports
    unhealthy, where the cluster serves device taints; None publishes no health taint."""
    health_poll_period: float = 5.0
    """How often the backend's health is read to update the health taints."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class SlicePublisher:
    """Keeps the ResourceSlices of ``node_name``'s pool for ``driver`` as the backend says.

    ``pool`` defaults to the node name. ``api_version`` (e.g. ``"v1beta1"``) skips
    discovery; without it the newest served resource.k8s.io version is used.

    Longer than most classes: one reconcile (read, plan, carry out) and the three
    loops that start it (the retry loop, the health and slice watches) share the
    owner, the served version and features and the wake-up event, and stay together.
    """

    def __init__(
        self,
        client: KubeClient,
        backend: ClaimBackend | Invoker,
        *,
        driver: str,
        node_name: str,
        pool: str | None = None,
        api_version: str | None = None,
        settings: PublisherSettings | None = None,
        metrics: DriverMetrics | None = None,
        events: NodeEvents | None = None,
    ) -> None:
        self.client = client
        self.events = events
        self.backend = normalize(backend)
        self.driver = driver
        self.node_name = node_name
        self.pool = pool or node_name
        self.settings = settings or PublisherSettings()
        self.metrics = metrics
        self._api_version = api_version
        self._node_uid: str | None = None
        self._generation: int | None = None
        self._wake = asyncio.Event()
        self._own_versions: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._reported_skips: tuple[str, ...] = ()
        self._reported_unserved: frozenset[str] = frozenset()
        self._served: frozenset[str] | None = None
        self._unhealthy: frozenset[str] = frozenset()
        self._watched: dict[str, Mapping[str, Any]] | None = None
        """This node's slices by name, as the watch delivered them and this publisher
        wrote them since; None while no watch is current (before its first list, after
        it broke)."""
        self.reconciles = 0
        """Completed reconciles (for tests and the audit)."""
        self.published = asyncio.Event()
        """Set once a reconcile has completed: the node's slices are what the backend says."""

    @property
    def generation(self) -> int | None:
        """The pool generation last published (None before the first reconcile)."""
        return self._generation

    def trigger(self) -> None:
        """Ask for a reconcile soon (call when the backend's devices changed)."""
        self._wake.set()

    # -- one pass ------------------------------------------------------------------------

    async def api_version(self) -> str:
        if self._api_version is None:
            self._api_version = await versions.negotiate_resource_version(self.client)
        return self._api_version

    async def _owner(self) -> slices.NodeOwner:
        if self._node_uid is None:
            try:
                node = await self.client.get(resources.NODES, self.node_name)
            except status.ApiError as error:
                if not error.not_found:
                    raise
                log.warning(
                    "Node %s not found: publishing its ResourceSlices without an owner",
                    self.node_name,
                )
            else:
                self._node_uid = str(node["metadata"]["uid"])
        return slices.NodeOwner(self.node_name, self._node_uid)

    async def reconcile_once(self) -> slices.PoolPlan:
        """Read devices and live slices, write the difference; the plan it carried out.

        Raises ``slices.InvalidDeviceError`` (nothing written) when the driver, pool or
        node name would be refused, ``status.ApiError`` when the API server refuses a write.
        A single device that would be refused is left out, with a log line and an Event.
        """
        for attempt in range(self.settings.conflict_retries + 1):
            try:
                # A retry re-reads from the API server: the write was refused as stale.
                plan = await self._reconcile(fresh=attempt > 0)
            except status.ApiError as error:
                stale = error.conflict or error.not_found  # changed or deleted since the list
                if not stale or attempt >= self.settings.conflict_retries:
                    raise
                self._count_retry("conflict" if error.conflict else "not-found")
                log.info("ResourceSlice changed under us (attempt %d); re-reading", attempt + 1)
                continue
            self.reconciles += 1
            self.published.set()
            return plan
        raise AssertionError("unreachable")  # pragma: no cover

    async def check_names(self) -> None:
        """List the backend's devices once and refuse (``slices.InvalidDeviceError``, one
        problem per device and name) any attribute or capacity name qualified with this
        driver's own name. ``Driver.start`` calls it before anything is published: the
        first point where the devices and the driver name meet (a ``Device`` does not
        know its driver)."""
        problems = published.own_domain_problems(await self.backend.devices(), driver=self.driver)
        if problems:
            raise slices.InvalidDeviceError(problems)

    async def _live_slices(self, resource: resources.Resource, *, fresh: bool) -> list[Any]:
        """The node's live slices: what the watch delivered, else a list."""
        if self._watched is not None and not fresh:
            return list(self._watched.values())
        listed = await self.client.list(resource, field_selector=self._field_selector())
        return list(listed.get("items") or [])

    def _remember(self, change: watching.Change) -> None:
        """Keep ``_watched`` as the watch says (a SYNC replaces it)."""
        if change.type == watching.SYNC:
            self._watched = {_name(o): o for o in change.objects}
        elif self._watched is not None and change.object is not None:
            if change.type == watching.DELETED:
                self._watched.pop(_name(change.object), None)
            else:
                self._watched[_name(change.object)] = change.object

    def _wrote(self, name: str, written: Mapping[str, Any] | None) -> None:
        """Keep ``_watched`` as this publisher's write left it (None: deleted): its echo
        may come after the next reconcile."""
        if self._watched is None:
            return
        if written is None:
            self._watched.pop(name, None)
        else:
            self._watched[_name(written)] = written

    async def _reconcile(self, *, fresh: bool = False) -> slices.PoolPlan:
        version = await self.api_version()
        resource = resources.resource_slices(version)
        owner = await self._owner()
        served = await self.served_features()
        counter_sets = await self.backend.counter_sets()
        built = published.build_pool(
            await self.backend.devices(),
            driver=self.driver,
            pool=self.pool,
            node_name=self.node_name,
            counter_sets=counter_sets,
            served=served,
            extra_taints=await self._health_taints(served),
        )
        await self._report_skipped(built.skipped)
        self._report_unserved(built.unserved)
        chunks = built.chunks
        live = await self._live_slices(resource, fresh=fresh)
        actual = [shapes.from_version(item, version) for item in live]
        plan = slices.plan_pool(
            chunks,
            actual,
            driver=self.driver,
            pool=self.pool,
            node=owner,
            last_generation=self._generation,
            counter_chunks=built.counter_chunks,
        )
        for write in plan.writes:
            await self._carry_out(write, resource, owner)
        if plan.writes:
            log.info(
                "published pool %s generation %d: %s",
                self.pool,
                plan.generation,
                ", ".join(f"{w.verb} {w.name or 'new'}" for w in plan.writes),
            )
        self._generation = plan.generation
        return plan

    async def _carry_out(
        self, write: slices.SliceWrite, resource: resources.Resource, owner: slices.NodeOwner
    ) -> None:
        version = resource.version
        if write.verb == "create":
            body = slices.slice_object(write.spec, driver=self.driver, node=owner)
            written = await self.client.create(resource, shapes.to_version(body, version))
            self._wrote(_name(written), written)
        elif write.verb == "update":
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": write.spec}
            spec = shapes.to_version(body, version)["spec"]
            # A merge patch keeps what it does not name: a slice that held devices and
            # now holds counter sets (or moves from nodeName to a selector) must have the
            # old field removed in the same write, or the server refuses both at once.
            patch = {"spec": {**dict.fromkeys(_REPLACED_SPEC_FIELDS), **spec}}
            written = await self.client.merge_patch(
                resource, write.name, patch, resource_version=write.resource_version
            )
            self._wrote(write.name, written)
        else:
            try:
                written = await self.client.delete(
                    resource, write.name, resource_version=write.resource_version
                )
            except status.ApiError as error:
                if not error.not_found:
                    raise
                self._wrote(write.name, None)
                return
            self._wrote(write.name, None)
        self._own_versions.add(str((written.get("metadata") or {}).get("resourceVersion")))
        if self.metrics is not None:
            self.metrics.slice_publishes.labels(verb=write.verb).inc()

    async def served_features(self) -> frozenset[str]:
        """The optional slice features this cluster serves (read once from ``/version``)."""
        if self._served is None:
            server: tuple[int, int] | None = None
            try:
                server = features.parse_server_version(await self.client.request("GET", "/version"))
            except status.ApiError as error:
                log.warning("cannot read the server version (%s): no optional device fields", error)
            self._served = features.served_features(server, self.settings.feature_gates)
            log.info(
                "cluster %s serves: %s",
                f"Kubernetes {server[0]}.{server[1]}" if server else "of unknown version",
                ", ".join(sorted(self._served)) or "no optional device fields",
            )
        return self._served

    async def _health_taints(self, served: frozenset[str]) -> dict[str, devices.DeviceTaint]:
        effect = self.settings.unhealthy_taint_effect
        if effect is None or "DRADeviceTaints" not in served:
            return {}
        health = await self.backend.health()
        unhealthy = sorted(n for n, h in health.items() if h.status is HealthStatus.UNHEALTHY)
        self._unhealthy = frozenset(unhealthy)
        taint = devices.DeviceTaint(key=f"{self.driver}/unhealthy", effect=effect)
        return dict.fromkeys(unhealthy, taint)

    def _report_unserved(self, unserved: frozenset[str]) -> None:
        """One log line per feature a device asks for that the cluster does not serve."""
        for gate in sorted(unserved - self._reported_unserved):
            what = next(f.what for f in features.FEATURES if f.gate == gate)
            log.warning(
                "devices of pool %s use %s, which this cluster does not serve (feature gate "
                "%s off): published without them",
                self.pool,
                what,
                gate,
            )
        self._reported_unserved = unserved

    async def _report_skipped(self, skipped: tuple[str, ...]) -> None:
        """Say once, per change, which devices are left out and why (log line and Event)."""
        if skipped == self._reported_skips:
            return
        self._reported_skips = skipped
        for problem in skipped:
            log.error("device not published: %s", problem)
            if self.events is not None:
                try:
                    await self.events.warn("DeviceNotPublished", problem)
                except _API_FAILURES as error:
                    log.warning("could not record an Event for %s: %s", problem, error)

    def _field_selector(self) -> str:
        return slice_field_selector(node_name=self.node_name, driver=self.driver)

    def _count_retry(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.api_retries.labels(reason=reason).inc()

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile for ever: on slice changes, on ``trigger()`` and every resync period."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow_slices(), name=f"{self.settings.task_name}:watch")
            if self.settings.unhealthy_taint_effect is not None:
                group.create_task(self._follow_health(), name=f"{self.settings.task_name}:health")
            await self._reconcile_forever()

    def start(self) -> asyncio.Task[None]:
        """``run()`` as a named background task; ``stop()`` ends it."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=self.settings.task_name
            )
        return self._task

    async def stop(self) -> None:
        """Cancel the task ``start()`` made and wait until it and its watch have ended."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _reconcile_forever(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            wait = self.settings.resync_period
            try:
                await self.reconcile_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except slices.InvalidDeviceError as error:
                log.error("pool %s not published: %s", self.pool, error)  # noqa: TRY400 - no traceback: the message says it all
            except _API_FAILURES as error:
                wait = self.settings.backoff[min(failures, len(self.settings.backoff) - 1)]
                failures += 1
                log.warning(
                    "publishing pool %s failed (attempt %d), again in %.1fs: %s",
                    self.pool,
                    failures,
                    wait,
                    error,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    async def _follow_health(self) -> None:
        """Reconcile when the set of unhealthy devices changes (their taints change)."""
        while True:
            await asyncio.sleep(self.settings.health_poll_period)
            if "DRADeviceTaints" not in (self._served or frozenset()):
                continue
            try:
                health = await self.backend.health()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a backend's health failure must not stop publishing
                log.warning("reading device health failed: %s", error)
                continue
            unhealthy = frozenset(
                n for n, h in health.items() if h.status is HealthStatus.UNHEALTHY
            )
            if unhealthy != self._unhealthy:
                self._wake.set()

    async def _follow_slices(self) -> None:
        failures = 0
        while True:
            try:
                resource = resources.resource_slices(await self.api_version())
                changes = watching.follow(
                    self.client, resource, field_selector=self._field_selector()
                )
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        failures = 0
                        self._remember(change)
                        if self._needs_reconcile(change):
                            self._wake.set()
            except asyncio.CancelledError:
                self._watched = None
                raise
            except _API_FAILURES as error:
                self._watched = None
                wait = self.settings.backoff[min(failures, len(self.settings.backoff) - 1)]
                failures += 1
                log.warning("following ResourceSlices failed, again in %.1fs: %s", wait, error)
                await asyncio.sleep(wait)

    def _needs_reconcile(self, change: watching.Change) -> bool:
        """Whether a change may need a write: anything but the echo of our own writes."""
        if change.type == watching.SYNC:
            self._own_versions.clear()  # echoes from before a relist will not come
            return True
        obj: Mapping[str, Any] = change.object or {}
        written = str((obj.get("metadata") or {}).get("resourceVersion"))
        if written in self._own_versions:
            self._own_versions.discard(written)
            return False
        return True
