"""A claim's CDI spec: built from what the backend returned (``build_spec``), then
written and removed off the event loop, made durable in groups (``SpecWriter``).

The specs of claims that reach the step together are written (temp file, fsync,
rename) one after the other by one thread, and their directory is fsynced once for
all of them (``SpecStore.apply``): the same group-commit shape as the claim records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dralet.cdi import names as cdi_names
from dralet.cdi import spec as cdi_spec
from dralet.cdi.store import SpecChange, SpecStamp, SpecStore, WrittenSpec
from dralet.checkpoint.model import DeviceRecord
from dralet.node.backend import ClaimRef, PreparedDevice
from dralet.node.batches import BatchThread, in_groups
from dralet.node.claims import devicemetadata, records
from dralet.node.settings import DriverSettings

__all__ = ["SpecWriter", "build_spec", "external_id_problem"]


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


def external_id_problem(ids: Sequence[str], kind: str) -> str:
    """Why the backend's external CDI ids cannot be given to the kubelet, if so."""
    for external in ids:
        try:
            parsed = cdi_names.parse_qualified_name(external)
        except cdi_names.CDINameError as exc:
            return f"external CDI id {external!r}: {exc}"
        if parsed.kind == kind:
            return (
                f"external CDI id {external!r} has the driver's own kind "
                f"{kind}: its specs are dralet's to write"
            )
    return ""


def build_spec(
    settings: DriverSettings,
    metadata_files: devicemetadata.MetadataFiles,
    ref: ClaimRef,
    devices: Sequence[DeviceRecord],
    results: Sequence[PreparedDevice],
    metadata: Mapping[str, str],
    claim: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The claim's CDI spec: a CDI device per device (and per further edits); the
    device metadata mounts go with each request's first device."""
    mounts = (
        devicemetadata.mounts(
            settings.driver_name, ref, devices, list(metadata), metadata_files, claim
        )
        if metadata
        else {}
    )
    cdi_devices = []
    for index, (d, r) in enumerate(zip(devices, results, strict=True)):
        edits = r.edits
        if index in mounts:
            edits = edits.merged(cdi_spec.ContainerEdits(mounts=tuple(mounts[index])))
        names = records.cdi_names(records.cdi_device_name(ref.uid, d), len(r.more_edits))
        for name, device_edits in zip(names, (edits, *r.more_edits), strict=True):
            cdi_devices.append(cdi_spec.CDIDevice(name=name, container_edits=device_edits))
    # Validated here, as a value: the spec store then writes it without parsing the
    # document back (``to_json`` is pinned to ``from_json`` by a property test).
    return cdi_spec.to_json(cdi_spec.Spec(kind=settings.cdi_kind, devices=tuple(cdi_devices)))
