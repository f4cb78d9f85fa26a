"""The façade: run a backend as a DRA driver, from ``import dralet`` alone.

``Driver`` is the handle: ``start()`` wires everything a production driver needs (the
directory checks, API access, the claim source, the ResourceSlice publisher, node Events,
recovery, the kubelet's gRPC services, health and metrics, stale-claim cleanup),
``publish()`` asks for the devices to be re-published, ``stop()`` shuts down in stages,
``wait()`` returns once stopped. ``run()`` is the blocking form a driver's ``main`` calls:
it stops on SIGTERM or SIGINT. ``dralet run --driver NAME`` is ``run(NAME, settings)``.

The shape follows the Go helper k8s.io/dynamic-resource-allocation/kubeletplugin:
``Start(ctx, plugin, opts...)`` returns a ``*Helper`` with ``PublishResources`` and
``Stop`` (kubeletplugin/draplugin.go, v0.34); here the options are one ``Settings``
value and publishing re-reads the backend's devices instead of taking them as an
argument.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from dralet import logs
from dralet.kube import access
from dralet.metrics import DriverMetrics
from dralet.node import directories, factory
from dralet.node.backend import ClaimBackend, ClaimRef, DeviceMetadata
from dralet.node.claims import ClaimSource, RecoveryReport
from dralet.node.claims.calls import normalize
from dralet.node.config import Settings
from dralet.node.publisher import SlicePublisher
from dralet.node.runner import BackgroundWork, NodeServer

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["Driver", "run"]

log = logging.getLogger("dralet.run")


class Driver:
    """A DRA driver on this node: ``backend`` served to the kubelet as ``settings`` say.

    ``backend`` is a ``ClaimBackend``, or the name of an
    installed driver (an entry point of the ``dralet.drivers`` group) or
    ``package.module:factory``; a named driver is looked up now (``DriverLoadError`` if
    unknown) and built by its factory with ``settings`` and ``config`` once the
    directories are checked. ``claims`` replaces the API as the source of ResourceClaims
    (tests; the API is still used for publishing unless ``settings.api.standalone``).

    Use ``async with Driver(...)`` or ``start()`` … ``stop()``; one ``Driver`` runs once.
    """

    def __init__(
        self,
        backend: ClaimBackend | str,
        settings: Settings,
        *,
        config: factory.DriverConfig | None = None,
        claims: ClaimSource | None = None,
        metrics: DriverMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or DriverMetrics()
        self._make_backend: Callable[[], ClaimBackend]
        if isinstance(backend, str):
            name, driver_config = backend, config or factory.DriverConfig()
            target, make = factory.find(name)
            log.info("driver %s (%s)", name, target)
            self._make_backend = lambda: factory.build(name, make, settings, driver_config)
        else:
            self._make_backend = lambda: backend
        self._claims = claims
        self._backend: ClaimBackend | None = None
        self._server: NodeServer | None = None
        self._client: KubeClient | None = None
        self._publisher: SlicePublisher | None = None
        self._started = False
        self._stopped = asyncio.Event()
        self._closing: asyncio.Future[None] | None = None

    @property
    def backend(self) -> ClaimBackend:
        """The backend being served (built by its factory in ``start()`` when named)."""
        if self._backend is None:
            raise RuntimeError("the driver's backend is built by start()")
        return self._backend

    @property
    def server(self) -> NodeServer:
        """The node side: claim engine, gRPC servers (for tests and introspection)."""
        if self._server is None:
            raise RuntimeError("the driver is not started")
        return self._server

    @property
    def recovery(self) -> RecoveryReport | None:
        """What recovery found and did at start (None before ``start()``)."""
        return self._server.recovery if self._server is not None else None

    @property
    def registered(self) -> bool:
        """Whether the kubelet has confirmed the registration (Go: ``RegistrationStatus``)."""
        return self._server is not None and self._server.registration.registered.is_set()

    @property
    def publishing(self) -> bool:
        """Whether this driver keeps ResourceSlices published (API access and ``publish``)."""
        return self._publisher is not None

    async def start(self) -> None:
        """Check the inputs, recover, serve and register; returns once the kubelet can
        call the driver. Nothing is created before the API access is resolved; on any
        failure everything started so far is stopped again, and the directories it made
        that are still empty are removed, before the error is raised:
        ``access.ApiAccessError`` (API access unusable), ``directories.DirectoryError``
        (a directory unusable), ``DriverStartError`` (the factory failed), or
        ``PermanentError`` (a socket in use, say; or, when publishing, a device attribute
        or capacity named with the driver's own domain, which the Go helper refuses)."""
        if self._started:
            raise RuntimeError("a Driver starts once; make a new one")
        self._started = True
        s = self.settings
        api = s.api.resolve()
        prepared = directories.prepare_directories(s.driver)  # before the backend's setup
        for note in prepared.notes:
            log.warning("%s", note)
        try:
            self._backend = self._make_backend()
            if api is None:
                if self._claims is None:
                    log.warning(
                        "standalone: no Kubernetes API, so every NodePrepareResources fails "
                        "(claims cannot be read), no ResourceSlices are published and no "
                        "finalizers are set"
                    )
                self._server = NodeServer(
                    s.driver, self._backend, claims=self._claims, metrics=self.metrics
                )
            else:
                log.info("Kubernetes API: %s", api.describe())
                self._server = await self._connected(api)
            await self._server.start()
            self._hand_publish_to_backend()
        except BaseException:
            await self._close()
            prepared.undo()  # a driver config refused by its factory changes nothing
            raise

    async def _connected(self, api: access.ApiAccess) -> NodeServer:
        # The API client is imported only here: a standalone driver (and its memory)
        # never loads it.
        from dralet.kube.claims import ClaimClient
        from dralet.kube.client import connect
        from dralet.kube.events import NodeEvents

        s = self.settings
        client = await connect(api_access=api, settings=s.api.client, metrics=self.metrics)
        self._client = client
        events = NodeEvents(client, driver=s.driver.driver_name, node_name=s.driver.node_name)
        background: dict[str, BackgroundWork] = {}
        ready_after: tuple[asyncio.Event, ...] = ()
        if s.publish:
            publisher = SlicePublisher(
                client,
                normalize(self.backend, timeout=s.driver.backend_call_timeout),
                driver=s.driver.driver_name,
                node_name=s.driver.node_name,
                pool=s.driver.pool_name,
                settings=s.publishing,
                metrics=self.metrics,
                events=events,
            )
            self._publisher = publisher
            await publisher.check_names()  # before any socket exists or slice is written
            background["resourceslices"] = publisher.run
            ready_after = (publisher.published,)
        return NodeServer(
            s.driver,
            self.backend,
            claims=self._claims if self._claims is not None else ClaimClient(client),
            metrics=self.metrics,
            background=background,
            events=events,
            ready_after=ready_after,
        )

    def _hand_publish_to_backend(self) -> None:
        """A backend that defines ``use_publish(publish)`` gets ``Driver.publish`` once the
        driver serves, to call when its devices change (as a Go plugin keeps the helper
        ``Start`` returned and calls its ``PublishResources``); one that defines
        ``use_update_request_metadata(update)`` gets ``Driver.update_request_metadata``."""
        hook = getattr(self._backend, "use_publish", None)
        if callable(hook):
            hook(self.publish)
        update_hook = getattr(self._backend, "use_update_request_metadata", None)
        if callable(update_hook):
            update_hook(self.update_request_metadata)

    def publish(self) -> bool:
        """Re-read the backend's devices and publish them soon (call after a device
        change); does not wait for the write. False when this driver publishes nothing
        (standalone, or ``settings.publish`` off)."""
        if self._publisher is None:
            return False
        self._publisher.trigger()
        return True

    async def update_request_metadata(
        self, claim: ClaimRef, request: str, devices: Mapping[str, DeviceMetadata]
    ) -> int:
        """Rewrite the device metadata file of ``request`` of prepared ``claim`` (with
        ``DriverSettings.device_metadata``): each device named in ``devices`` gets that
        entry, the rest keep theirs; the file is replaced atomically, its generation bumped
        and the claim's record updated. Returns the new generation. For what is known
        only after prepare, such as a pod's IP address (the Go helper's
        ``UpdateRequestMetadata``). Raises ``PermanentError`` when the claim is not
        prepared with metadata for that request, or a device is not in it."""
        return await self.server.update_request_metadata(claim, request, devices)

    async def stop(self) -> None:
        """Staged shutdown: deregister, refuse new calls, give in-flight calls
        ``shutdown_grace`` seconds, cancel the rest, close the API client. Idempotent;
        a second caller waits for the first one's shutdown."""
        await self._close()

    async def _close(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shut_down())
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        try:
            if self._server is not None:
                await self._server.stop()
        finally:
            if self._client is not None:
                await self._client.close()
            self._stopped.set()

    async def wait(self) -> None:
        """Return once the driver has stopped (``stop()``, or a signal under ``run()``)."""
        await self._stopped.wait()

    async def __aenter__(self) -> Driver:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


async def serve(driver: Driver) -> None:
    """Start ``driver``, serve until SIGTERM or SIGINT (or until it is stopped), stop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await driver.start()
        signalled = asyncio.ensure_future(stop.wait())
        stopped = asyncio.ensure_future(driver.wait())
        try:
            await asyncio.wait((signalled, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
            stopped.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await driver.stop()


def run(
    backend: ClaimBackend | str,
    settings: Settings,
    *,
    config: factory.DriverConfig | None = None,
) -> None:
    """Run a DRA driver on this node until SIGTERM or SIGINT: the blocking entry point.

    ``backend`` is your ``dralet.ClaimBackend``, or the name of an installed driver, or
    ``package.module:factory`` (what ``dralet run --driver`` passes). ``settings`` is a
    ``dralet.Settings``; ``config`` the named driver's own ``DriverConfig``. Raises
    ``ApiAccessError``, ``DriverLoadError``, ``DirectoryError`` or ``DriverStartError``
    (one line each) when the driver cannot start; returns after the staged shutdown.

    **The backend** (``dralet.ClaimBackend``; each method a plain ``def``, run in a thread
    pool, or an ``async def``; each idempotent because dralet calls them again after a
    crash; each call bounded by ``DriverSettings.backend_call_timeout``)::

        devices() -> Sequence[Device]                  # this node's devices, stable order
        prepare_claim(allocation) -> Sequence[PreparedDevice]   # one per device, in order
        release_claim(allocation, states) -> None      # undo it; unknown devices are OK
        devices_in_use() -> Mapping[str, str | Collection[str]]  # device -> claim UID(s)
        survives_reboot(device, state) -> bool         # still prepared after a reboot?
        health() -> Mapping[str, DeviceHealth]         # left-out devices are UNKNOWN

    ``prepare_claim`` gets a ``ClaimAllocation``: the claim (``ClaimRef``), all its
    allocation results for this driver on this node (``AllocatedDevice``: request, pool,
    device, admin access, share ID, consumed capacity, tolerations, the configs that
    apply to it) and all its opaque configs for this driver in precedence order
    (``DeviceConfig``: ``source`` "class" or "claim", the ``requests`` it applies to, its
    ``parameters``; DeviceClass configs before claim configs, a later one wins). It
    returns one ``PreparedDevice`` (``ContainerEdits`` + JSON ``state``, and
    ``more_edits`` for further CDI devices, each with its own CDI id) per device and
    may be called again with the same allocation: it must return the same results. All
    states are stored in dralet's checkpoint in one write the moment it returns, before
    the claim is answered; ``release_claim`` gets the same allocation (same configs) and
    exactly those states (empty for a device whose prepare never returned). A failure
    after some devices were prepared is ``PartialPrepareError(cause, results)``, so they
    are released with their states. A call past the timeout fails the claim with a
    retryable error and is rolled back. A device shared by several claims (consumable
    capacity) is reported in ``devices_in_use`` with all of its claims' UIDs.

    Optionally, ``use_publish(publish)``: called once the driver serves, with a function
    to call whenever the backend's devices change (a hot-plugged or retired device); it
    re-reads ``devices()`` and publishes soon, without waiting for the periodic resync.
    Optionally, ``use_update_request_metadata(update)``: called once the driver serves,
    with ``Driver.update_request_metadata`` (an ``async`` function of the claim's
    ``ClaimRef``, a request name and device name -> ``DeviceMetadata``), for a driver that
    learns a device's metadata only after prepare, such as a pod's IP address: the
    request's metadata file is rewritten atomically and its generation bumped.
    Optionally, ``restore_held(held)``: called at start, once dralet's claim records are
    read, with every device they hold (``HeldDevice``: claim UID, device, the state
    prepare returned), for a backend that keeps no record of its own of what is held.

    ``health()`` may raise ``HealthNotSupported``: the driver then advertises no health
    service, and each kubelet release leaves it alone without logging errors.

    Raise ``TemporaryError(delay=...)`` to be retried within the kubelet's deadline,
    ``PermanentError`` or ``ClaimError`` to fail that claim (rolled back, other claims go
    on); anything else is logged as a bug and fails the claim. Keep durable records in
    ``settings.state_dir`` and write them with ``dralet.atomic_write``; guard shared
    hardware state with ``dralet.FileLock``.

    dralet owns the rest: registration with the kubelet, the DRA gRPC services (v1 and
    v1beta1) and the health services, the crash-safe checkpoint, per-claim CDI spec files
    (``<driver>/claim=<uid>-<device>``), recovery after kill -9 or reboot, stale-claim
    cleanup, the claim finalizer, ResourceSlices of this node's pool (re-read on
    ``Driver.publish()``, every ``publishing.resync_period``, and on health changes),
    Kubernetes Events, gRPC health (liveness and ``readiness``) and Prometheus metrics.

    **Settings**: ``Settings(driver=DriverSettings(driver_name=..., node_name=...),
    api=ApiSettings(...), publish=True, publishing=PublisherSettings(...))``; every
    field has a docstring and a default except the driver and node names.

    **A driver package** run by ``dralet run --driver NAME`` registers a factory in the
    ``dralet.drivers`` entry-point group of its ``pyproject.toml``::

        [project.entry-points."dralet.drivers"]
        acme-fpga = "acme_fpga.driver:factory"

    with the signature of ``dralet.BackendFactory``::

        def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> ClaimBackend

    ``config.path``/``config.text`` are the ``--driver-config FILE`` (``config.load()``
    parses YAML/JSON), ``config.options`` the ``--driver-option KEY=VALUE`` pairs. The
    factory is called after the directories are checked and before any socket exists;
    what it raises stops the driver with one line naming the driver.
    ``dralet run --driver package.module:factory`` works without an entry point.

    **Tests**: ``async with dralet.Driver(backend, settings, claims=...)`` runs the same
    driver in your event loop; ``dralet conformance`` checks it over its real sockets.

    Logs go to the root logger; when nothing configured it, ``run`` logs text at INFO to
    stderr (``dralet run --log-format json`` for JSON lines).
    """
    if not logging.getLogger().handlers:
        logs.configure()
    asyncio.run(serve(Driver(backend, settings, config=config)))
