"""``ClaimClient``: ResourceClaims for the claim engine, through the API server.

Implements ``dralet.node.claims.ClaimSource``: read a claim, and add or remove this
driver's finalizer with one strategic-merge patch and no read. ``metadata.finalizers`` is
``patchStrategy=merge`` (k8s.io/apimachinery@v0.37.2 pkg/apis/meta/v1/types.go), so the
patch ``{"metadata": {"finalizers": [ours]}}`` adds only our entry and
``{"metadata": {"$deleteFromPrimitiveList/finalizers": [ours]}}`` removes only it
(pkg/util/strategicpatch/patch.go): the other writers' entries stay, with no
resourceVersion precondition and so no 409 to retry: the server applies the patch to the
object as stored, again after a write conflict of its own (k8s.io/apiserver@v0.37.2
pkg/endpoints/handlers/patch.go, ``applyPatch`` under the registry's GuaranteedUpdate).

The patch carries the claim's UID: a claim recreated under the same name has another, and
the server refuses the change of an immutable field (422, k8s.io/apimachinery@v0.37.2
pkg/api/validation/objectmeta.go); a claim being deleted takes no new finalizer (422, the
same file's ``ValidateNoNewFinalizers``); a missing one is 404. A claim with another UID
under the same name is a different claim: for the caller, the one it meant is gone. A
refusal is confirmed with a read (the rare path) before the finalizer is given up on.
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

_DELETE_FROM_FINALIZERS = "$deleteFromPrimitiveList/finalizers"
_INVALID = 422


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
            if error.not_found or error.conflict or error.code == _INVALID:
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
        if current is not None and add:
            metadata = current.get("metadata") or {}
            if metadata.get("uid") == uid:
                if finalizer in (metadata.get("finalizers") or []):
                    return True
                if metadata.get("deletionTimestamp"):
                    return False
        resource = await self._resource()
        change: dict[str, Any] = (
            {"finalizers": [finalizer]} if add else {_DELETE_FROM_FINALIZERS: [finalizer]}
        )
        try:
            await self.client.strategic_merge_patch(
                resource, name, {"metadata": {"uid": uid, **change}}, namespace=namespace
            )
        except status.ApiError as error:
            if error.not_found:
                return False
            if not (error.conflict or error.code == _INVALID):
                raise
            return await self._refused(namespace, name, uid, finalizer, add=add, error=error)
        return True

    async def _refused(
        self,
        namespace: str,
        name: str,
        uid: str,
        finalizer: str,
        *,
        add: bool,
        error: status.ApiError,
    ) -> bool:
        """A refused finalizer patch: False if the claim it meant is gone (or, to add,
        being deleted), else the refusal is raised as a temporary failure."""
        claim = await self.get_claim(namespace, name)
        metadata = (claim or {}).get("metadata") or {}
        if claim is None or metadata.get("uid") != uid:
            return False
        present = finalizer in (metadata.get("finalizers") or [])
        if add and metadata.get("deletionTimestamp") and not present:
            return False
        if present == add:
            return True
        raise errors.TemporaryError(
            f"ResourceClaim {namespace}/{name}: finalizer patch refused: {error}"
        )
