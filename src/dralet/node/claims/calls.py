"""Every call out of the process the engine makes, each between two failpoints (those
of backend calls are hit by ``dralet.node.invoke``, around each call it makes).

A crash just before or just after one leaves the device or the API object in a
different state than the record says; the crash suite kills the driver at each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from dralet import failpoints
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import (
    AllocatedDevice,
    ClaimAllocation,
    ClaimBackend,
    ClaimRef,
    PreparedDevice,
)
from dralet.node.claims.records import claim_allocation
from dralet.node.claims.source import ClaimSource, DeviceStatusWriter
from dralet.node.invoke import Invoker, normalize

__all__ = ["Calls"]

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
        """The backend every call goes to; set a backend of either contract to swap it."""
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
