"""Following a collection: list, then watch from the list's resourceVersion, for ever.

``follow`` resumes an ended or broken watch from the last resourceVersion it saw
(bookmarks included) and relists when the server says that version is gone (410), so a
long-running reconciler sees every change or, after a gap, a fresh full ``SYNC``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from dralet.kube import resources, status

if TYPE_CHECKING:
    from dralet.kube.client import KubeClient

__all__ = ["Change", "follow"]

log = logging.getLogger(__name__)

SYNC = "SYNC"
"""A ``Change`` type: the full current list (at start and after every relist)."""
DELETED = "DELETED"
"""A ``Change`` type: ``object`` is gone (a watch event type, k8s.io/apimachinery
pkg/watch/watch.go)."""


@dataclass(frozen=True)
class Change:
    """One thing that happened to the followed collection."""

    type: str
    """``SYNC``, ``ADDED``, ``MODIFIED`` or ``DELETED``."""
    object: Mapping[str, Any] | None = None
    """The object for ADDED/MODIFIED/DELETED (its last state when deleted)."""
    objects: tuple[Mapping[str, Any], ...] = field(default=())
    """Every object, for SYNC."""
    resource_version: str = ""
    """The collection's resourceVersion after this change."""


async def follow(
    client: KubeClient,
    resource: resources.Resource,
    *,
    namespace: str | None = None,
    label_selector: str = "",
    field_selector: str = "",
) -> AsyncGenerator[Change, None]:
    """Every change to the selected objects, starting with a ``SYNC`` of all of them."""
    backoff = client.settings.watch_backoff
    failures = 0
    resource_version = ""
    while True:
        try:
            if not resource_version:
                listed = await client.list(
                    resource,
                    namespace=namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                )
                resource_version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
                yield Change(
                    SYNC,
                    objects=tuple(listed.get("items") or ()),
                    resource_version=resource_version,
                )
            async for event in client.watch(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=resource_version,
            ):
                failures = 0
                obj = event.get("object") or {}
                resource_version = str(
                    (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                )
                if event.get("type") == "BOOKMARK":
                    continue
                yield Change(str(event.get("type")), object=obj, resource_version=resource_version)
        except asyncio.CancelledError:
            raise
        except status.ApiError as error:
            if error.gone:
                log.info(
                    "watch of %s: resourceVersion %s is gone; relisting",
                    resource.plural,
                    resource_version,
                )
                client.count_retry("gone")
                resource_version = ""
                continue
            delay = backoff[min(failures, len(backoff) - 1)]
            failures += 1
            client.count_retry(f"watch-{error.code}")
            log.warning(
                "watch of %s failed (attempt %d), again in %.1fs: %s",
                resource.plural,
                failures,
                delay,
                error,
            )
            await asyncio.sleep(error.retry_after or delay)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            delay = backoff[min(failures, len(backoff) - 1)]
            failures += 1
            client.count_retry("watch-connection")
            log.warning(
                "watch of %s broke (attempt %d), again in %.1fs: %r",
                resource.plural,
                failures,
                delay,
                error,
            )
            await asyncio.sleep(delay)
