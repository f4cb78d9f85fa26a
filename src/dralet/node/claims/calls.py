"""Every call out of the process the engine makes: to the claim source (the API) and to
the backend, each between two failpoints and bounded by its own limit of calls in
flight.

``ClaimSource`` is the port to the API: ``dralet.kube.ClaimClient`` in a driver,
``dralet.testing.MemoryClaims`` in an author's tests. ``Invoker`` calls the backend
with its timeout, failpoints around every call, and a prepare or release that outlives
its timeout remembered until it ends. A crash just before or just after a call leaves
the device or the API object in a different state than the record says; the crash suite
kills the driver at each.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from dralet import errors, failpoints
from dralet.checkpoint.model import Checkpoint, DeviceRecord
from dralet.node import devices as node_devices
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimBackend,
    ClaimRef,
    ClaimUID,
    Device,
    DeviceHealth,
    HeldDevice,
    PreparedDevice,
)
from dralet.node.claims.records import claim_allocation

__all__ = [
    "BackendTimeoutError",
    "Calls",
    "ClaimSource",
    "DeviceStatusWriter",
    "EventSink",
    "Invoker",
    "NoClaimSource",
    "finalizer_name",
    "held_devices",
    "normalize",
]


class ClaimSource(Protocol):
    """Where the claim engine reads ResourceClaims and keeps its finalizer on them:
    ``dralet.kube.ClaimClient`` against the API server, ``dralet.testing.MemoryClaims``
    in an author's tests."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ResourceClaim as a JSON dict, or None when it does not exist."""
        ...

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Add ``finalizer`` to the claim with this UID; False if that claim is gone.

        ``current`` is the claim as the caller just read it: a source that patches with
        a resourceVersion precondition starts from it instead of reading it again.
        """
        ...

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        """Remove ``finalizer``; True also when the claim (with this UID) is already gone."""
        ...


@runtime_checkable
class DeviceStatusWriter(Protocol):
    """A ``ClaimSource`` that can also write the claim's ``status.devices`` entries of
    one driver (``DriverSettings.write_device_status``)."""

    async def apply_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        driver: str,
        devices: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Make ``devices`` this driver's entries of the claim with this UID (an empty
        list removes them), leaving other drivers' alone; False if that claim is gone."""
        ...


class NoClaimSource:
    """The source of a driver run without an API server: nothing can be prepared (the
    claim's allocation is needed), and there is no finalizer to add or remove."""

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        raise errors.PermanentError("no ResourceClaim source configured (no API server)")

    async def add_finalizer(self, *_: Any, **__: Any) -> bool:
        return False

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        return True


class EventSink(Protocol):
    async def warn(self, reason: str, message: str) -> None:
        """Record a Warning Event about this node (``dralet.kube.events.NodeEvents``)."""
        ...


def finalizer_name(driver: str) -> str:
    return f"{driver}/prepared"


FP_BACKEND_PREPARE_BEFORE = "backend.prepare.before"
FP_BACKEND_PREPARE_AFTER = "backend.prepare.after"
FP_BACKEND_RELEASE_BEFORE = "backend.release.before"
FP_BACKEND_RELEASE_AFTER = "backend.release.after"
failpoints.declare(
    FP_BACKEND_PREPARE_BEFORE,
    FP_BACKEND_PREPARE_AFTER,
    FP_BACKEND_RELEASE_BEFORE,
    FP_BACKEND_RELEASE_AFTER,
)


class BackendTimeoutError(errors.TemporaryError):
    """A backend call did not return within its timeout; what it did is not known."""


class Invoker:
    """A ``ClaimBackend``, offered as async methods with timeouts."""

    def __init__(
        self, inner: ClaimBackend, *, timeout: float | None = None, hit_failpoints: bool = True
    ) -> None:
        self.inner = inner
        self.hit_failpoints = hit_failpoints
        self.timeout = timeout if timeout else None
        self._abandoned: dict[str, asyncio.Future[Any]] = {}

    async def _call(self, what: str, uid: str | None, fn: Callable[..., Any], *args: Any) -> Any:
        running = self._abandoned.get(uid) if uid is not None else None
        if running is not None and not running.done():
            raise errors.TemporaryError(
                f"an earlier backend call for claim {uid} timed out and is still running"
            )
        if inspect.iscoroutinefunction(fn):
            try:
                async with asyncio.timeout(self.timeout):
                    return await fn(*args)
            except TimeoutError:
                raise self._timed_out(what) from None
        context = contextvars.copy_context()
        future = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(context.run, fn, *args)
        )
        try:
            done, _ = await asyncio.wait({future}, timeout=self.timeout)
        except asyncio.CancelledError:
            self._abandon(uid, future)  # the thread runs on; the claim waits for it
            raise
        if not done:
            self._abandon(uid, future)
            raise self._timed_out(what)
        result = future.result()
        if inspect.isawaitable(result):
            # A plain ``def`` that returned an awaitable (a wrapper or a mock).
            return await result
        return result

    def _abandon(self, uid: str | None, future: asyncio.Future[Any]) -> None:
        if uid is not None:
            self._abandoned[uid] = future
            future.add_done_callback(lambda _: self._forget(uid, future))
        # Retrieve its outcome when it ends, so it is never logged as unretrieved.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _hit(self, name: str) -> None:
        if self.hit_failpoints:
            failpoints.hit(name)

    def _forget(self, uid: str, future: asyncio.Future[Any]) -> None:
        if self._abandoned.get(uid) is future:
            del self._abandoned[uid]

    def _timed_out(self, what: str) -> BackendTimeoutError:
        return BackendTimeoutError(f"backend {what} did not return within {self.timeout:g}s")

    # ------------------------------------------------------------------ the contract

    async def devices(self) -> Sequence[Device]:
        return cast(Sequence[Device], await self._call("devices", None, self.inner.devices))

    async def counter_sets(self) -> Sequence[node_devices.CounterSet]:
        if not isinstance(self.inner, node_devices.CounterSetSource):
            return ()
        return cast(
            Sequence[node_devices.CounterSet],
            await self._call("counter_sets", None, self.inner.counter_sets),
        )

    async def prepare_claim(self, allocation: ClaimAllocation) -> tuple[PreparedDevice, ...]:
        uid = allocation.claim.uid
        self._hit(FP_BACKEND_PREPARE_BEFORE)
        results = tuple(
            await self._call("prepare_claim", uid, self.inner.prepare_claim, allocation)
        )
        self._hit(FP_BACKEND_PREPARE_AFTER)
        if len(results) != len(allocation.devices):
            raise errors.ClaimError(
                uid,
                f"backend prepared {len(results)} devices for the claim's "
                f"{len(allocation.devices)}",
            )
        return results

    async def release_claim(
        self, allocation: ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        self._hit(FP_BACKEND_RELEASE_BEFORE)
        await self._call(
            "release_claim",
            allocation.claim.uid,
            self.inner.release_claim,
            allocation,
            [dict(s) for s in states],
        )
        self._hit(FP_BACKEND_RELEASE_AFTER)

    async def devices_in_use(self) -> dict[str, frozenset[str]]:
        raw = cast(
            Mapping[str, str | Collection[str]],
            await self._call("devices_in_use", None, self.inner.devices_in_use),
        )
        return {
            device: frozenset((holders,) if isinstance(holders, str) else holders)
            for device, holders in raw.items()
            if holders
        }

    async def survives_reboot(self, device: AllocatedDevice, state: Mapping[str, Any]) -> bool:
        return bool(
            await self._call("survives_reboot", None, self.inner.survives_reboot, device, state)
        )

    async def survives_reboot_many(
        self, devices: Sequence[tuple[AllocatedDevice, Mapping[str, Any]]], *, limit: int = 16
    ) -> list[bool | BaseException]:
        """``survives_reboot`` of several devices, an answer or an error each, under one
        deadline: an async backend's calls run at most ``limit`` at a time; a blocking
        backend's run one after the other in ONE thread (a hop per device cost more than
        the checks), and those still unanswered at the deadline time out."""
        if not devices:
            return []
        fn = self.inner.survives_reboot
        found: list[object] = [self._timed_out("survives_reboot")] * len(devices)
        if inspect.iscoroutinefunction(fn):
            # ``limit`` workers take the next device in turn: a task per device cost more
            # than the checks, and ``limit`` is the backend's bound on calls in flight.
            pending = iter(enumerate(devices))

            async def worker() -> None:
                for index, (device, state) in pending:
                    try:
                        found[index] = await fn(device, state)
                    except Exception as exc:  # noqa: BLE001 - this device's own answer
                        found[index] = exc

            workers = [asyncio.ensure_future(worker()) for _ in range(min(limit, len(devices)))]
            _, late = await asyncio.wait(workers, timeout=self.timeout)
            for task in late:
                task.cancel()
            return [a if isinstance(a, BaseException) else bool(a) for a in found]

        def check_all() -> None:
            for index, (device, state) in enumerate(devices):
                try:
                    found[index] = fn(device, state)
                except Exception as exc:  # noqa: BLE001 - this device's own answer
                    found[index] = exc

        # One thread, one deadline: past it, ``_call`` abandons the thread and the
        # devices it has not answered yet keep their timeout error.
        with contextlib.suppress(BackendTimeoutError):
            await self._call("survives_reboot", None, check_all)
        answers: list[bool | BaseException] = []
        for answer in list(found):  # a copy: an abandoned thread may still fill in the rest
            if inspect.isawaitable(answer):  # a plain ``def`` returning one (a mock)
                try:
                    answer = await answer
                except Exception as exc:  # noqa: BLE001 - this device's own answer
                    answer = exc
            answers.append(answer if isinstance(answer, BaseException) else bool(answer))
        return answers

    async def health(self) -> Mapping[str, DeviceHealth]:
        return cast(Mapping[str, DeviceHealth], await self._call("health", None, self.inner.health))

    async def restore_held(self, held: Callable[[], Sequence[HeldDevice]]) -> None:
        """Tell the backend what the claim records hold (``held()``, made only then), if
        it asks (``restore_held``)."""
        hook = getattr(self.inner, "restore_held", None)
        if callable(hook):
            await self._call("restore_held", None, hook, tuple(held()))


def held_devices(records: Checkpoint) -> tuple[HeldDevice, ...]:
    """Every device a record in a holding state names, with the state prepare returned."""
    return tuple(
        HeldDevice(
            claim=ClaimUID(uid),
            device=device.device,
            state=dict(device.prepared_state),
        )
        for uid, record in records.claims.items()
        if record.holds_devices
        for device in record.devices
    )


def normalize(backend: ClaimBackend | Invoker, *, timeout: float | None = None) -> Invoker:
    """``backend`` as an ``Invoker`` (itself when it already is one)."""
    if isinstance(backend, Invoker):
        return backend
    return Invoker(backend, timeout=timeout)


FP_API_ADD_FINALIZER_BEFORE = "api.add-finalizer.before"
FP_API_ADD_FINALIZER_AFTER = "api.add-finalizer.after"
FP_API_REMOVE_FINALIZER_BEFORE = "api.remove-finalizer.before"
FP_API_REMOVE_FINALIZER_AFTER = "api.remove-finalizer.after"
failpoints.declare(
    FP_API_ADD_FINALIZER_BEFORE,
    FP_API_ADD_FINALIZER_AFTER,
    FP_API_REMOVE_FINALIZER_BEFORE,
    FP_API_REMOVE_FINALIZER_AFTER,
)


class Calls:
    """The calls, each kind bounded by its own limit of calls in flight."""

    def __init__(
        self,
        backend: Invoker,
        claims: ClaimSource,
        *,
        finalizer: str,
        api_limit: int = 16,
        backend_limit: int = 16,
    ) -> None:
        self._invoker = backend
        self.claims = claims
        self.finalizer = finalizer
        self._api = asyncio.Semaphore(api_limit)
        self._backend = asyncio.Semaphore(backend_limit)
        self.backend_limit = backend_limit
        self.api_limit = api_limit

    @property
    def backend(self) -> Invoker:
        """The backend every call goes to; set a ``ClaimBackend`` (or an ``Invoker``) to
        swap it."""
        return self._invoker

    @backend.setter
    def backend(self, backend: ClaimBackend | Invoker) -> None:
        self._invoker = normalize(backend, timeout=self._invoker.timeout)

    async def get_claim(self, ref: ClaimRef) -> Mapping[str, Any] | None:
        async with self._api:
            return await self.claims.get_claim(ref.namespace, ref.name)

    async def add_finalizer(
        self, ref: ClaimRef, *, current: Mapping[str, Any] | None = None
    ) -> bool:
        """``current``: the claim as this prepare read it (it is not read twice)."""
        failpoints.hit(FP_API_ADD_FINALIZER_BEFORE)
        async with self._api:
            added = await self.claims.add_finalizer(
                ref.namespace, ref.name, ref.uid, self.finalizer, current=current
            )
        failpoints.hit(FP_API_ADD_FINALIZER_AFTER)
        return added

    async def remove_finalizer(self, ref: ClaimRef) -> bool:
        failpoints.hit(FP_API_REMOVE_FINALIZER_BEFORE)
        async with self._api:
            removed = await self.claims.remove_finalizer(
                ref.namespace, ref.name, ref.uid, self.finalizer
            )
        failpoints.hit(FP_API_REMOVE_FINALIZER_AFTER)
        return removed

    async def apply_device_status(
        self, ref: ClaimRef, driver: str, entries: Sequence[Mapping[str, Any]]
    ) -> bool:
        """This driver's ``status.devices`` entries of the claim (``[]`` removes them)."""
        if not isinstance(self.claims, DeviceStatusWriter):
            raise TypeError(f"{type(self.claims).__name__} cannot write claim device status")
        async with self._api:
            return await self.claims.apply_device_status(
                ref.namespace, ref.name, ref.uid, driver, entries
            )

    async def prepare_claim(
        self, ref: ClaimRef, devices: Sequence[DeviceRecord]
    ) -> tuple[PreparedDevice, ...]:
        """One ``prepare_claim`` for these devices; one result each, in their order."""
        async with self._backend:
            return await self.backend.prepare_claim(claim_allocation(ref, devices))

    async def release_claim(self, ref: ClaimRef, devices: Sequence[DeviceRecord]) -> None:
        """``release_claim`` with the devices' configs and exactly the states recorded."""
        async with self._backend:
            await self.backend.release_claim(
                claim_allocation(ref, devices), [d.prepared_state for d in devices]
            )

    async def survives_reboot(
        self, devices: Sequence[tuple[AllocatedDevice, Mapping[str, Any]]]
    ) -> list[bool | BaseException]:
        """``survives_reboot`` of each device (an answer or an error each), as many in
        flight at once as ``prepare_claim`` calls may be."""
        return await self.backend.survives_reboot_many(devices, limit=self.backend_limit)

    async def release_unrecorded(self, ref: ClaimRef, pool: str, device: str) -> None:
        """Release a device the backend holds with no record of it (nothing to hand back)."""
        async with self._backend:
            await self.backend.release_claim(
                ClaimAllocation(ref, (AllocatedDevice(request="", pool=pool, device=device),)),
                [{}],
            )
