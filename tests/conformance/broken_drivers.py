"""Small DRA drivers for testing ``dralet conformance``: real ``grpc.aio`` servers on unix
sockets (registration socket and DRA socket, serving v1 and v1beta1), reading claims
from the API stand-in's store.

``ReferenceDriver`` does everything right; each subclass breaks exactly one rule the
way real drivers have broken it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dralet.cdi import spec as cdi_spec
from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from dralet.testing.apiserver import ApiServer

DRIVER = "broken.example.com"
NODE = "node-a"
CDI_KIND = f"{DRIVER}/gpu"
_UID = re.compile(r"[0-9a-f-]{36}")


@dataclass
class ReferenceDriver:
    """A correct DRA driver in a hundred lines (the baseline the broken ones change)."""

    api: ApiServer
    root: Path
    prepared: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Claim UID → (device, CDI id) of each prepared device."""
    _servers: list[grpc.aio.Server] = field(default_factory=list)

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugins" / DRIVER / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "plugins_registry" / f"{DRIVER}-reg.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    async def start(self) -> None:
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        dra = grpc.aio.server()
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_ServiceV1(self, dra_v1_pb2), dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            _ServiceV1beta1(self, dra_v1beta1_pb2), dra
        )
        dra.add_insecure_port(f"unix:{self.dra_socket}")
        await dra.start()
        self._servers.append(dra)
        registration = grpc.aio.server()
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(
            _Registration(self), registration
        )
        registration.add_insecure_port(f"unix:{self.registration_socket}")
        await registration.start()
        self._servers.append(registration)

    async def stop(self) -> None:
        for server in reversed(self._servers):
            await server.stop(None)
        self._servers.clear()

    def info(self) -> pluginregistration_v1_pb2.PluginInfo:
        return pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=str(self.dra_socket),
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    # -- the rules each broken driver changes ------------------------------------------

    def spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"{DRIVER.replace('/', '-')}-gpu_{uid}.json"

    def cdi_id(self, uid: str, device: str) -> str:
        return f"{CDI_KIND}={uid}-{device}"

    async def fetch_failed(self, context: Any, message: str) -> str:
        """A claim could not be fetched: its own error (one bad claim fails alone)."""
        return message

    async def unprepare_unknown(self, context: Any, uid: str) -> str:
        """Unprepare of a claim this driver does not hold: success."""
        return ""

    # -- the driver ------------------------------------------------------------------------

    async def prepare_claim(
        self, context: Any, ns: str, uid: str, name: str
    ) -> tuple[list[tuple[str, str]], str]:
        if uid in self.prepared:
            return self.prepared[uid], ""
        claim = self.api.get("ResourceClaim", name, namespace=ns)
        if claim is None or claim["metadata"]["uid"] != uid:
            return [], await self.fetch_failed(context, f"ResourceClaim {ns}/{name} not found")
        results = claim["status"]["allocation"]["devices"]["results"]
        devices = [r["device"] for r in results if r["driver"] == DRIVER]
        document = cdi_spec.to_json(
            cdi_spec.Spec(
                kind=CDI_KIND,
                devices=tuple(
                    cdi_spec.CDIDevice(
                        name=f"{uid}-{d}",
                        container_edits=cdi_spec.ContainerEdits(env=(f"BROKEN_GPU={d}",)),
                    )
                    for d in devices
                ),
            )
        )
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        self.spec_path(uid).write_text(json.dumps(document))
        self.prepared[uid] = [(d, self.cdi_id(uid, d)) for d in devices]
        return self.prepared[uid], ""

    async def unprepare_claim(self, context: Any, uid: str) -> str:
        if uid not in self.prepared:
            return await self.unprepare_unknown(context, uid)
        self.spec_path(uid).unlink(missing_ok=True)
        del self.prepared[uid]
        return ""


class NonIdempotentUnprepare(ReferenceDriver):
    """Fails the second unprepare of a claim instead of treating it as done."""

    def __init__(self, api: ApiServer, root: Path) -> None:
        super().__init__(api, root)
        self.unprepared: set[str] = set()

    async def unprepare_claim(self, context: Any, uid: str) -> str:
        if uid in self.unprepared:
            return f"claim {uid} was already unprepared"
        error = await super().unprepare_claim(context, uid)
        if uid not in self.prepared:
            self.unprepared.add(uid)
        return error


class NotFoundOnUnknownClaim(ReferenceDriver):
    """Answers unprepare of a claim it does not hold with gRPC NotFound."""

    async def unprepare_unknown(self, context: Any, uid: str) -> str:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"claim {uid} is not prepared here")
        raise AssertionError("abort returns by raising")


class WholeCallError(ReferenceDriver):
    """Fails the whole prepare call when one claim cannot be fetched (the Go helper's way)."""

    async def fetch_failed(self, context: Any, message: str) -> str:
        await context.abort(grpc.StatusCode.UNKNOWN, f"get resource claims: {message}")
        raise AssertionError("abort returns by raising")


class UnqualifiedCDIIds(ReferenceDriver):
    """Returns bare device names ("gpu0") as CDI ids."""

    def cdi_id(self, uid: str, device: str) -> str:
        return device.replace("-", "")


BROKEN_DRIVERS: dict[str, type[ReferenceDriver]] = {
    "non-idempotent-unprepare": NonIdempotentUnprepare,
    "not-found-on-unknown-claim": NotFoundOnUnknownClaim,
    "whole-call-error": WholeCallError,
    "unqualified-cdi-ids": UnqualifiedCDIIds,
}


class _Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    def __init__(self, driver: ReferenceDriver) -> None:
        self.driver = driver

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return self.driver.info()

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class _Service:
    """One DRA service version; the messages of v1 and v1beta1 have the same fields."""

    def __init__(self, driver: ReferenceDriver, pb2: Any) -> None:
        self.driver = driver
        self.pb2 = pb2

    async def _validate(self, claims: Any, context: Any) -> None:
        for claim in claims:
            if not claim.uid or not _UID.fullmatch(claim.uid):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "claim uid is empty")

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        await self._validate(request.claims, context)
        response = self.pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            devices, error = await self.driver.prepare_claim(
                context, claim.namespace, claim.uid, claim.name
            )
            entry = response.claims[claim.uid]
            entry.error = error
            for device, cdi_id in devices:
                entry.devices.add(
                    request_names=[], pool_name=NODE, device_name=device, cdi_device_ids=[cdi_id]
                )
        return response

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        await self._validate(request.claims, context)
        response = self.pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = await self.driver.unprepare_claim(context, claim.uid)
        return response


class _ServiceV1(_Service, dra_v1_pb2_grpc.DRAPluginServicer):
    pass


class _ServiceV1beta1(_Service, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    pass
