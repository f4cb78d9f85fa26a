"""CDI spec writes and removals off the event loop, made durable in groups.

The specs of claims that reach the step together are written (temp file, fsync,
rename) one after the other by one thread, and their directory is fsynced once for
all of them (``SpecStore.apply``): the same group-commit shape as the claim records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dralet.cdi.store import SpecChange, SpecStamp, SpecStore, WrittenSpec
from dralet.node.batches import BatchThread

__all__ = ["SpecWriter"]


class SpecWriter:
    def __init__(self, specs: SpecStore) -> None:
        self.specs = specs
        self._thread: BatchThread[SpecChange, WrittenSpec | bool] = BatchThread(
            "dralet-cdi-specs", specs.apply
        )

    async def write(
        self, claim_uid: str, document: dict[str, Any], *, checked: bool = False
    ) -> SpecStamp:
        """The claim's spec, durable once this returns; the written file's stamp.
        ``checked`` as ``SpecChange.checked``."""
        written = await self._thread.submit(SpecChange(claim_uid, document, checked))
        assert isinstance(written, WrittenSpec)
        return written.stamp

    async def write_many(
        self, documents: Sequence[tuple[str, dict[str, Any]]], *, checked: bool = False
    ) -> list[SpecStamp | BaseException]:
        """Several claims' specs (claim UID, document), each durable or failed alone;
        ``checked`` as ``SpecChange.checked``."""
        results = await self._thread.submit_many(
            [SpecChange(uid, document, checked) for uid, document in documents]
        )
        return [r.stamp if isinstance(r, WrittenSpec) else _failure(r) for r in results]

    async def remove(self, claim_uid: str) -> bool:
        """The claim's spec gone for good once this returns; whether it was there."""
        return bool(await self._thread.submit(SpecChange(claim_uid, None)))

    def stop(self) -> None:
        self._thread.stop()


def _failure(result: bool | BaseException) -> BaseException:
    if isinstance(result, BaseException):
        return result
    return AssertionError("a spec write answered as a removal")
