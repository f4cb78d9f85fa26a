"""The DRA edge: the v1 and v1beta1 DRAPlugin servicers (one implementation).

Both DRA versions have the same messages (v1 adds ``share_id``), so one function builds
each response from the claim engine's outcome using the version's own message module. A
malformed request fails as a whole with InvalidArgument before anything is touched;
everything about one claim goes into that claim's entry.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import grpc

from dralet import errors, kubenames, logs
from dralet.node.backend import (
    ClaimRef,
    ClaimUID,
)
from dralet.node.claims import ClaimEngine, PrepareOutcome
from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)

__all__ = ["DRA_SERVICES", "DRAv1Servicer", "DRAv1beta1Servicer", "parse_claims"]

log = logging.getLogger(__name__)

DRA_SERVICES = (
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
)


@dataclass(frozen=True)
class ParsedClaims:
    refs: list[ClaimRef] = field(default_factory=list)
    """Valid claims, deduplicated, keyed by the UID exactly as the kubelet sent it."""
    refused: dict[str, str] = field(default_factory=dict)
    """UID as sent → per-claim error (a UID the engine must not re-key, e.g. upper-case)."""


def parse_claims(claims: Sequence[Any]) -> ParsedClaims:
    """Validate the kubelet's ``(namespace, uid, name)`` claim references.

    Raises ``InvalidRequestError`` naming the first bad field (nothing has been touched).
    A UID that is a UUID but not in the API server's canonical form is refused for that
    claim only: answering under another key than the kubelet sent would lose the answer.
    """
    parsed = ParsedClaims()
    seen: dict[str, ClaimRef] = {}
    for index, claim in enumerate(claims):
        namespace, uid, name = claim.namespace, claim.uid, claim.name
        where = f"claims[{index}]"
        uid_problem = kubenames.uid_problem(uid)
        if uid_problem is not None and kubenames.uid_problem(uid.lower()) is None:
            parsed.refused[uid] = f"claim uid {uid} {uid_problem}"
            continue
        if uid_problem is not None:
            raise errors.InvalidRequestError(f"{where}: uid {uid[:64]!r} {uid_problem}")
        namespace_problem = kubenames.dns_label_problem(namespace) if namespace else "is empty"
        if namespace_problem is not None:
            raise errors.InvalidRequestError(
                f"{where}: namespace {namespace[:64]!r} {namespace_problem}"
            )
        name_problem = kubenames.dns_subdomain_problem(name) if name else "is empty"
        if name_problem is not None:
            raise errors.InvalidRequestError(f"{where}: name {name[:64]!r} {name_problem}")
        ref = ClaimRef(uid=ClaimUID(uid), namespace=namespace, name=name)
        before = seen.get(uid)
        if before is not None and before != ref:
            raise errors.InvalidRequestError(
                f"{where}: uid {uid} appears twice with different names "
                f"({before.namespace}/{before.name} and {namespace}/{name})"
            )
        if before is None:
            seen[uid] = ref
            parsed.refs.append(ref)
    return parsed


async def _parse_or_abort(request: Any, context: Any) -> ParsedClaims:
    try:
        return parse_claims(request.claims)
    except errors.InvalidRequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise


async def _abort_irreversible(context: Any, exc: errors.IrreversibleError) -> None:
    # The only path to Internal: a backend could neither finish nor undo a device.
    log.error("irreversible failure: %s", exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"irreversible failure, manual repair: {exc}")


_O = TypeVar("_O")


async def _engine_call(
    request: Any, context: Any, call: Callable[[Sequence[ClaimRef]], Awaitable[dict[str, _O]]]
) -> tuple[ParsedClaims, dict[str, _O]]:
    """The request's claims checked at the edge, then the engine's ``call`` of those it
    took; an irreversible failure fails the RPC (Internal)."""
    parsed = await _parse_or_abort(request, context)
    try:
        return parsed, await call(parsed.refs)
    except errors.IrreversibleError as exc:
        await _abort_irreversible(context, exc)
        raise


def _fill_prepare_response(
    pb2: ModuleType, outcomes: Mapping[str, PrepareOutcome], *, with_share_id: bool
) -> Any:
    response = pb2.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]  # touching the key creates the entry
        if outcome.error:
            entry.error = outcome.error
            continue
        for device in outcome.devices:
            out = entry.devices.add(
                request_names=list(device.request_names),
                pool_name=device.pool,
                device_name=device.device,
                cdi_device_ids=[*device.cdi_device_ids, *device.external_cdi_ids],
            )
            if with_share_id and device.share_id:
                out.share_id = device.share_id
    return response


def _fill_unprepare_response(pb2: ModuleType, outcomes: Mapping[str, str]) -> Any:
    response = pb2.NodeUnprepareResourcesResponse()
    for uid, error in outcomes.items():
        entry = response.claims[uid]
        if error:
            entry.error = error
    return response


class _DRAImplementation:
    """The one implementation behind both DRA service versions."""

    def __init__(self, engine: ClaimEngine, *, pb2: ModuleType, with_share_id: bool) -> None:
        self.engine = engine
        self.pb2 = pb2
        self.with_share_id = with_share_id

    async def prepare(self, request: Any, context: Any) -> Any:
        with logs.bind(request_id=uuid.uuid4().hex[:12], rpc="NodePrepareResources"):
            parsed, outcomes = await _engine_call(request, context, self.engine.prepare)
            for uid, error in parsed.refused.items():
                outcomes[uid] = PrepareOutcome(error=error)
            return _fill_prepare_response(self.pb2, outcomes, with_share_id=self.with_share_id)

    async def unprepare(self, request: Any, context: Any) -> Any:
        with logs.bind(request_id=uuid.uuid4().hex[:12], rpc="NodeUnprepareResources"):
            parsed, outcomes = await _engine_call(request, context, self.engine.unprepare)
            outcomes.update(parsed.refused)
            return _fill_unprepare_response(self.pb2, outcomes)


class _DRAServicerMethods:
    """The two RPCs, shared by both versions' servicer classes."""

    _impl: _DRAImplementation

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return await self._impl.prepare(request, context)

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return await self._impl.unprepare(request, context)


class DRAv1Servicer(_DRAServicerMethods, dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, engine: ClaimEngine) -> None:
        self._impl = _DRAImplementation(engine, pb2=dra_v1_pb2, with_share_id=True)


class DRAv1beta1Servicer(_DRAServicerMethods, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, engine: ClaimEngine) -> None:
        self._impl = _DRAImplementation(engine, pb2=dra_v1beta1_pb2, with_share_id=False)
