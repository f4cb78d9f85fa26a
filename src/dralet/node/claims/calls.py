"""Every call out of the process the engine makes, each between two failpoints.

A crash just before or just after one leaves the device or the API object in a
different state than the record says; the crash suite kills the driver at each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from dralet import failpoints
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import AllocatedDevice, ClaimRef, DeviceBackend, PreparedDevice
from dralet.node.claims.source import ClaimSource

__all__ = ["Calls", "allocated"]

FP_BACKEND_PREPARE_BEFORE = "backend.prepare.before"
FP_BACKEND_PREPARE_AFTER = "backend.prepare.after"
FP_BACKEND_RELEASE_BEFORE = "backend.release.before"
FP_BACKEND_RELEASE_AFTER = "backend.release.after"
FP_API_ADD_FINALIZER_BEFORE = "api.add-finalizer.before"
FP_API_ADD_FINALIZER_AFTER = "api.add-finalizer.after"
FP_API_REMOVE_FINALIZER_BEFORE = "api.remove-finalizer.before"
FP_API_REMOVE_FINALIZER_AFTER = "api.remove-finalizer.after"
failpoints.declare(
    FP_BACKEND_PREPARE_BEFORE,
    FP_BACKEND_PREPARE_AFTER,
    FP_BACKEND_RELEASE_BEFORE,
    FP_BACKEND_RELEASE_AFTER,
    FP_API_ADD_FINALIZER_BEFORE,
    FP_API_ADD_FINALIZER_AFTER,
    FP_API_REMOVE_FINALIZER_BEFORE,
    FP_API_REMOVE_FINALIZER_AFTER,
)


def allocated(record: DeviceRecord) -> AllocatedDevice:
    """The device as the backend saw it in ``prepare``: same request, pool, config."""
    return AllocatedDevice(
        request=record.request_names[0] if record.request_names else "",
        pool=record.pool,
        device=record.device,
        admin_access=record.admin_access,
        share_id=record.share_id,
        config=record.config,
    )


class Calls:
    """The calls, each kind bounded by its own limit of calls in flight."""

    def __init__(
        self,
        backend: DeviceBackend,
        claims: ClaimSource,
        *,
        finalizer: str,
        api_limit: int = 16,
        backend_limit: int = 16,
    ) -> None:
        self.backend = backend
        self.claims = claims
        self.finalizer = finalizer
        self._api = asyncio.Semaphore(api_limit)
        self._backend = asyncio.Semaphore(backend_limit)

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

    async def prepare_device(self, ref: ClaimRef, device: DeviceRecord) -> PreparedDevice:
        failpoints.hit(FP_BACKEND_PREPARE_BEFORE)
        async with self._backend:
            result = await self.backend.prepare(ref, allocated(device))
        failpoints.hit(FP_BACKEND_PREPARE_AFTER)
        return result

    async def release_device(self, ref: ClaimRef, device: DeviceRecord) -> None:
        """``release`` with the device's config and exactly the state ``prepare`` returned."""
        failpoints.hit(FP_BACKEND_RELEASE_BEFORE)
        async with self._backend:
            await self.backend.release(ref, allocated(device), device.prepared_state)
        failpoints.hit(FP_BACKEND_RELEASE_AFTER)

    async def release_unrecorded(self, ref: ClaimRef, pool: str, device: str) -> None:
        """Release a device the backend holds with no record of it (nothing to hand back)."""
        failpoints.hit(FP_BACKEND_RELEASE_BEFORE)
        async with self._backend:
            await self.backend.release(
                ref, AllocatedDevice(request="", pool=pool, device=device), {}
            )
        failpoints.hit(FP_BACKEND_RELEASE_AFTER)
