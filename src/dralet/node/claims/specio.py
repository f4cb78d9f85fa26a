"""CDI spec writes and removals off the event loop, made durable in groups.

The specs of claims that reach the step together are written (temp file, fsync,
rename) one after the other by one thread, and their directory is fsynced once for
all of them (``SpecStore.apply``): the same group-commit shape as the claim records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dralet.cdi.store import SpecChange, SpecStamp, SpecStore, WrittenSpec
from dralet.node.batches import BatchThread, in_groups

__all__ = ["SpecWriter"]


class SpecWriter:
    def __init__(self, specs: SpecStore) -> None:
        self.specs = specs
        self._thread: BatchThread[Sequence[SpecChange], list[WrittenSpec | bool | BaseException]]
        self._thread = BatchThread("dralet-cdi-specs", in_groups(specs.apply), size=len)

    async def _one(self, change: SpecChange) -> WrittenSpec | bool:
        (result,) = await self._thread.submit([change])
        if isinstance(result, BaseException):
            raise result
        return result

    async def write(
        self, claim_uid: str, document: dict[str, Any], *, checked: bool = False
    ) -> SpecStamp:
        """The claim's spec, durable once this returns; the written file's stamp.
        ``checked`` as ``SpecChange.checked``."""
        written = await self._one(SpecChange(claim_uid, document, checked))
        assert isinstance(written, WrittenSpec)
        return written.stamp

    async def write_many(
        self, documents: Sequence[tuple[str, dict[str, Any]]], *, checked: bool = False
    ) -> list[SpecStamp | BaseException]:
        """Several claims' specs (claim UID, document), each durable or failed alone,
        handed to the writer as one piece of work; ``checked`` as ``SpecChange.checked``."""
        if not documents:
            return []
        changes = [SpecChange(uid, document, checked) for uid, document in documents]
        try:
            results = await self._thread.submit(changes)
        except Exception as exc:  # noqa: BLE001 - the writer failed them all
            return [exc] * len(changes)
        return [r.stamp if isinstance(r, WrittenSpec) else _failure(r) for r in results]

    async def remove(self, claim_uid: str) -> bool:
        """The claim's spec gone for good once this returns; whether it was there."""
        return bool(await self._one(SpecChange(claim_uid, None)))

    async def remove_many(self, claim_uids: Sequence[str]) -> list[bool | BaseException]:
        """Several claims' specs removed, each for good or failed alone, handed to the
        writer as one piece of work; whether each was there."""
        if not claim_uids:
            return []
        try:
            results = await self._thread.submit([SpecChange(uid, None) for uid in claim_uids])
        except Exception as exc:  # noqa: BLE001 - the writer failed them all
            return [exc] * len(claim_uids)
        return [r if isinstance(r, BaseException) else bool(r) for r in results]

    def stop(self) -> None:
        self._thread.stop()


def _failure(result: bool | BaseException) -> BaseException:
    if isinstance(result, BaseException):
        return result
    return AssertionError("a spec write answered as a removal")
