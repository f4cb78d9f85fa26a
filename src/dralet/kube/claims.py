"""``ClaimClient``: ResourceClaims for the ledger, through the API server.

Implements ``dralet.node.claims.ClaimSource``: read a claim, and add or remove this
driver's finalizer with a JSON merge patch that carries the claim's resourceVersion as
a precondition, so a concurrent writer is never overwritten; a 409 means re-read and try
again. A claim with another UID under the same name is a different claim: for the
caller, the one it meant is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dralet import errors
from dralet.kube import resources, status, versions
from dralet.kube.client import KubeClient

__all__ = ["ClaimClient"]

log = logging.getLogger(__name__)


class ClaimClient:
    """ResourceClaims at the newest resource.k8s.io version the server serves.

    ``api_version`` (e.g. ``"v1beta1"``) skips discovery; without it the version is
    negotiated on first use. The ``KubeClient`` stays owned by the caller.
    """

    def __init__(self, client: KubeClient, *, api_version: str | None = None) -> None:
        self.client = client
        self._api_version = api_version
        self._lock = asyncio.Lock()

    async def api_version(self) -> str:
        """The resource.k8s.io version in use (negotiated once)."""
        if self._api_version is None:
            async with self._lock:
                if self._api_version is None:
                    self._api_version = await versions.negotiate_resource_version(self.client)
        return self._api_version

    async def _resource(self) -> resources.Resource:
        return resources.resource_claims(await self.api_version())

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ResourceClaim as served (JSON dict), or None when it does not exist."""
        resource = await self._resource()
        try:
            claim = await self.client.get(resource, name, namespace=namespace)
        except status.ApiError as error:
            if error.not_found:
                return None
            raise
        claim.setdefault("apiVersion", resource.api_version)
        claim.setdefault("kind", resource.kind)
        return claim

    async def add_finalizer(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        """Add ``finalizer`` to the claim with this UID; False if that claim is gone
        (missing, replaced by another UID, or already being deleted). ``current``, the
        claim as just read, saves the first read: a stale one only costs a 409 and a
        re-read."""
        return await self._change_finalizers(
            namespace, name, uid, finalizer, add=True, current=current
        )

    async def remove_finalizer(self, namespace: str, name: str, uid: str, finalizer: str) -> bool:
        """Remove ``finalizer``; True also when the claim with this UID is already gone."""
        await self._change_finalizers(namespace, name, uid, finalizer, add=False)
        return True

    async def apply_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        driver: str,
        devices: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Server-side apply of this driver's ``status.devices`` entries, with the driver
        name as field manager: the API keys the list by driver, pool, device and shareID,
        so the entries of other drivers (other managers) stay, and an empty list removes
        only this driver's. The UID in the body keeps the write off a recreated claim."""
        resource = await self._resource()
        body = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": [dict(d) for d in devices]},
        }
        try:
            await self.client.apply(
                resource, body, namespace=namespace, subresource="status", field_manager=driver
            )
        except status.ApiError as error:
            # A recreated claim: the server refuses the body's UID as a change of an
            # immutable field (422); a 409 is a conflict of the same claim.
            if error.not_found or error.conflict or error.code == 422:
                current = await self.get_claim(namespace, name)
                if current is None or (current.get("metadata") or {}).get("uid") != uid:
                    return False
            raise
        return True

    async def _change_finalizers(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        add: bool,
        current: Mapping[str, Any] | None = None,
    ) -> bool:
        resource = await self._resource()
        backoff = self.client.settings.conflict_backoff
        where = f"ResourceClaim {namespace}/{name}"
        for attempt in range(len(backoff) + 1):
            claim = current if attempt == 0 and current is not None else None
            if claim is None:
                claim = await self.get_claim(namespace, name)
            metadata = (claim or {}).get("metadata") or {}
            if claim is None or metadata.get("uid") != uid:
                return False
            finalizers = list(metadata.get("finalizers") or [])
            if add:
                if finalizer in finalizers:
                    return True
                if metadata.get("deletionTimestamp"):
                    return False
                finalizers.append(finalizer)
            else:
                if finalizer not in finalizers:
                    return True
                finalizers = [f for f in finalizers if f != finalizer]
            try:
                await self.client.merge_patch(
                    resource,
                    name,
                    {"metadata": {"finalizers": finalizers or None}},
                    namespace=namespace,
                    resource_version=str(metadata.get("resourceVersion")),
                )
                return True
            except status.ApiError as error:
                if error.not_found:
                    return False
                if not error.conflict or attempt >= len(backoff):
                    raise
                self.client.count_retry("conflict")
                log.info("%s changed under us (attempt %d); re-reading", where, attempt + 1)
                await asyncio.sleep(backoff[attempt])
        raise errors.TemporaryError(f"{where}: finalizer update kept conflicting")
