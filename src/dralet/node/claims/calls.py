"""Every call out of the process the engine makes, each between two failpoints (those
of backend calls are hit by ``dralet.node.invoke``, around each call it makes).

A crash just before or just after one leaves the device or the API object in a
different state than the record says; the crash suite kills the driver at each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from dralet import failpoints
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimRef,
    DeviceConfig,
    PreparedDevice,
)
from dralet.node.claims.source import ClaimSource, DeviceStatusWriter
from dralet.node.invoke import AnyBackend, Invoker, normalize
from dralet.node.tasks import raise_failure

__all__ = ["SUBREQUEST", "Calls", "allocated", "claim_allocation", "each", "each_until_late"]

T = TypeVar("T")
R = TypeVar("R")

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


def _config(stored: Mapping[str, Any]) -> DeviceConfig:
    return DeviceConfig(
        source="class" if stored.get("source") == "class" else "claim",
        requests=tuple(stored.get("requests") or ()),
        parameters=dict(stored.get("parameters") or {}),
    )


def allocated(record: DeviceRecord) -> AllocatedDevice:
    """The device as the backend saw it in ``prepare_claim``: same request, pool, configs."""
    return AllocatedDevice(
        request=record.request_names[0] if record.request_names else "",
        pool=record.pool,
        device=record.device,
        admin_access=record.admin_access,
        share_id=record.share_id,
        configs=tuple(_config(c) for c in record.configs),
        consumed_capacity={
            str(k): str(v) for k, v in (record.result_fields.get(CONSUMED) or {}).items()
        },
        tolerations=tuple(record.result_fields.get(TOLERATIONS) or ()),
        subrequest=str(record.result_fields.get(SUBREQUEST) or ""),
        extra={k: v for k, v in record.result_fields.items() if k not in _KEPT_APART},
    )


CONSUMED = "consumedCapacity"
TOLERATIONS = "tolerations"
SUBREQUEST = "subrequest"
"""Stored beside the result's other fields; not an API field name (the API writes
``request: gpu/large``)."""
_KEPT_APART = (CONSUMED, TOLERATIONS, SUBREQUEST)


def result_fields(device: AllocatedDevice) -> dict[str, Any]:
    """What of ``device`` the record keeps beyond request, pool, device and share ID."""
    fields: dict[str, Any] = dict(device.extra)
    if device.consumed_capacity:
        fields[CONSUMED] = dict(device.consumed_capacity)
    if device.tolerations:
        fields[TOLERATIONS] = [dict(t) for t in device.tolerations]
    if device.subrequest:
        fields[SUBREQUEST] = device.subrequest
    return fields


def claim_allocation(ref: ClaimRef, devices: Sequence[DeviceRecord]) -> ClaimAllocation:
    """What the backend is handed for these devices of a claim: each device, and the
    claim's configs that apply to any of them, in precedence order."""
    configs: dict[int, DeviceConfig] = {}
    for device in devices:
        for stored in device.configs:
            configs.setdefault(int(stored.get("order", 0)), _config(stored))
    return ClaimAllocation(
        claim=ref,
        devices=tuple(allocated(d) for d in devices),
        configs=tuple(configs[k] for k in sorted(configs)),
    )


async def each(
    items: Sequence[T], call: Callable[[T], Awaitable[R]], *, limit: int
) -> list[R | Exception]:
    """``call`` of every item, at most ``limit`` in flight; a result or the error each.

    ``limit`` workers take the next item in turn: a task per item costs more than the
    calls in a 1,000-claim batch. One item is called directly (no task at all).
    """
    found: list[R | Exception] = [AssertionError("never called")] * len(items)
    if len(items) == 1:
        try:
            found[0] = await call(items[0])
        except Exception as exc:  # noqa: BLE001 - this item's own answer
            found[0] = exc
        return found
    pending = iter(enumerate(items))

    async def worker() -> None:
        for index, item in pending:
            try:
                found[index] = await call(item)
            except Exception as exc:  # noqa: BLE001 - this item's own answer
                found[index] = exc

    await asyncio.gather(*(worker() for _ in range(min(limit, len(items)))))
    return found


_LATE_WORKERS: set[asyncio.Task[None]] = set()


async def each_until_late(
    items: Sequence[T], call: Callable[[T], Awaitable[R]], *, limit: int, patience: float
) -> tuple[list[R | Exception], dict[int, asyncio.Future[R | Exception]]]:
    """``each``, not waiting for stragglers: once every item has started and each call
    still running has run ``patience`` seconds, those items are left late (by index),
    each with a future its result will come through; the others' results are returned.
    A late call runs on until it answers through its future; cancelling that future
    cancels the call.
    """
    late: dict[int, asyncio.Future[R | Exception]] = {}
    if len(items) <= 1:  # no other item to hold up
        return await each(items, call, limit=limit), late
    found: list[R | Exception] = [AssertionError("never called")] * len(items)
    loop = asyncio.get_running_loop()
    pending = iter(enumerate(items))
    running: dict[int, tuple[float, asyncio.Task[Any] | None]] = {}  # index → began, by
    taken = 0

    async def worker() -> None:
        nonlocal taken
        for index, item in pending:
            taken += 1
            running[index] = (loop.time(), asyncio.current_task())
            try:
                result: R | Exception = await call(item)
            except Exception as exc:  # noqa: BLE001 - this item's own answer
                result = exc
            except BaseException as exc:  # cancelled, or the process "dying" at a failpoint
                _settle_late(late.get(index), exc)
                raise
            finally:
                del running[index]
            found[index] = result
            _settle_late(late.get(index), result)

    workers = [loop.create_task(worker()) for _ in range(min(limit, len(items)))]
    try:
        timeout = patience
        while True:
            finished, alive = await asyncio.wait(
                workers, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            raise_failure(finished)  # a BaseException (the process "dying" at a failpoint)
            if not alive:
                break
            # With every item taken, only the calls still running hold the others up,
            # and only until the youngest of them has run ``patience`` seconds.
            waited = loop.time() - max((t for t, _ in running.values()), default=loop.time())
            if taken == len(items) and running and waited >= patience:
                for index, (_, by) in running.items():
                    late[index] = future = loop.create_future()
                    if by is not None:
                        future.add_done_callback(_cancelling(by))
                for task in alive:  # kept alive until they answer (the loop holds tasks weakly)
                    _LATE_WORKERS.add(task)
                    task.add_done_callback(_LATE_WORKERS.discard)
                break
            timeout = max(patience - waited, patience / 10)
    except BaseException:
        # Cancelled, or one call "died": the others are cancelled and waited for (as
        # ``each``'s gather does), so none runs on past the caller's claim locks.
        for task in workers:
            task.cancel()
        await asyncio.wait(workers)
        raise
    return found, late


def _cancelling(task: asyncio.Task[Any]) -> Callable[[asyncio.Future[Any]], None]:
    """A late future's callback: its call is cancelled when the future is."""

    def cancelled(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            task.cancel()

    return cancelled


def _settle_late(future: asyncio.Future[Any] | None, outcome: object) -> None:
    """Hand a late item's outcome to its future (unless no one waits for it any more)."""
    if future is None or future.done():
        return
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


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
        """The backend every call goes to; set a backend of either contract to swap it."""
        return self._invoker

    @backend.setter
    def backend(self, backend: AnyBackend | Invoker) -> None:
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
