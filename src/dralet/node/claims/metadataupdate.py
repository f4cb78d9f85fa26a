"""A prepared claim's device metadata rewritten after prepare (the Go helper's
``Helper.UpdateRequestMetadata``, k8s.io/dynamic-resource-allocation@v0.38.0-beta.0
kubeletplugin/metadata.go): for a driver that learns a device's attributes (an IP
address, an interface name) only once the pod sandbox exists.

Under the claim's lock, the request's file is rewritten atomically with the generation
bumped, then the claim's record is updated so that a file rewritten at recovery carries
the update too. The file goes first: the workload sees the update at once, and a crash
between the two leaves a record one generation behind a file that is still there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dralet.checkpoint.model import ClaimState
from dralet.node.backend import DeviceMetadata
from dralet.node.claims import devicemetadata
from dralet.node.claims.engine import ClaimEngine

__all__ = ["update_request_metadata"]


async def update_request_metadata(
    engine: ClaimEngine, claim_uid: str, request: str, devices: Mapping[str, DeviceMetadata]
) -> int:
    """Rewrite the metadata file of ``request`` (its base name) of prepared claim
    ``claim_uid``: each device named in ``devices`` gets that entry, the others keep
    theirs. Returns the new generation; raises ``devicemetadata.MetadataUpdateError``
    when the claim is not prepared with metadata for that request."""
    settings = engine.settings
    if not settings.device_metadata:
        raise devicemetadata.MetadataUpdateError("device metadata is not enabled")
    base = request.split("/", 1)[0]
    async with engine.store.claim_lock(claim_uid):
        record, _ = await engine.store.record_now(claim_uid)
        if record is None or record.state != ClaimState.PREPARE_COMPLETED:
            raise devicemetadata.MetadataUpdateError(f"claim {claim_uid} is not prepared")
        text = record.device_metadata.get(base)
        if text is None:
            raise devicemetadata.MetadataUpdateError(
                f"claim {claim_uid} has no device metadata for request {base!r}"
            )
        new_text, generation = devicemetadata.updated(
            text, devices=devices, versions=settings.device_metadata_versions
        )
        await asyncio.to_thread(engine.metadata_files.write, claim_uid, {base: new_text})
        metadata = {**record.device_metadata, base: new_text}
        await engine.store.put(record.with_state(record.state, device_metadata=metadata))
    return generation
