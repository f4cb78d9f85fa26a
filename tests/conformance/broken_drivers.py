"""Small DRA drivers for testing ``dralet conformance``: real ``grpc.aio`` servers on unix
sockets (registration socket and DRA socket, serving v1 and v1beta1), reading claims
from the API stand-in's store.

``ReferenceDriver`` does everything right; each subclass breaks exactly one rule the
way real drivers have broken it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dralet.apiserver import ApiServer
from dralet.cdi import spec as cdi_spec
from dralet.protocol.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

DRIVER = "broken.example.com"
NODE = "node-a"
CDI_KIND = f"{DRIVER}/gpu"
_UID = re.compile(r"[0-9a-f-]{36}")


@dataclass
class ReferenceDriver:
    """A correct DRA driver in a hundred lines (the baseline the broken ones change)."""

    api: ApiServer
    root: Path
    prepared: dict[str, list[Prepared]] = field(default_factory=dict)
    """Claim UID → each prepared device; kept in ``state_file`` across restarts."""
    _servers: list[grpc.aio.Server] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def load_state(self) -> None:
        if self.state_file.exists():
            saved = json.loads(self.state_file.read_text())
            self.prepared = {uid: [Prepared(**d) for d in ds] for uid, ds in saved.items()}

    def save_state(self) -> None:
        saved = {uid: [vars(d) for d in ds] for uid, ds in self.prepared.items()}
        self.state_file.write_text(json.dumps(saved))

    async def restart(self) -> None:
        """Stop (no cleanup, like kill -9) and start again."""
        await self.stop()
        self.prepared = {}
        await self.start()

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
        self.load_state()
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
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

    def write_spec(self, path: Path, text: str) -> None:
        """Atomically: a temp file no runtime loads, then rename."""
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(text)
        os.replace(temp, path)

    def returned(self, result: dict[str, Any]) -> tuple[list[str], str]:
        """(request names, pool) returned for one allocation result."""
        return [result["request"]], result["pool"]

    async def fetch_failed(self, context: Any, message: str) -> str:
        """A claim could not be fetched: its own error (one bad claim fails alone)."""
        return message

    async def unprepare_unknown(self, context: Any, uid: str) -> str:
        """Unprepare of a claim this driver does not hold: success."""
        return ""

    # -- the driver ------------------------------------------------------------------------

    async def prepare_claim(
        self, context: Any, ns: str, uid: str, name: str
    ) -> tuple[list[Prepared], str]:
        if uid in self.prepared:
            return self.prepared[uid], ""
        claim = self.api.get("ResourceClaim", name, namespace=ns)
        if claim is None or claim["metadata"]["uid"] != uid:
            return [], await self.fetch_failed(context, f"ResourceClaim {ns}/{name} not found")
        results = claim["status"]["allocation"]["devices"]["results"]
        ours = [r for r in results if r["driver"] == DRIVER]
        prepared = []
        for result in ours:
            requests, pool = self.returned(result)
            cdi_id = self.cdi_id(uid, result["device"])
            prepared.append(Prepared(requests, pool, result["device"], cdi_id))
        document = cdi_spec.to_json(
            cdi_spec.Spec(
                kind=CDI_KIND,
                devices=tuple(
                    cdi_spec.CDIDevice(
                        name=p.cdi_id.rpartition("=")[2],
                        container_edits=cdi_spec.ContainerEdits(env=(f"BROKEN_GPU={p.device}",)),
                    )
                    for p in {p.cdi_id: p for p in prepared}.values()  # one entry per id
                ),
            )
        )
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        self.write_spec(self.spec_path(uid), json.dumps(document))
        self.prepared[uid] = prepared
        self.save_state()
        return prepared, ""

    async def unprepare_claim(self, context: Any, uid: str) -> str:
        if uid not in self.prepared:
            return await self.unprepare_unknown(context, uid)
        self.spec_path(uid).unlink(missing_ok=True)
        del self.prepared[uid]
        self.save_state()
        return ""


@dataclass
class Prepared:
    request_names: list[str]
    pool: str
    device: str
    cdi_id: str


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

    def write_spec(self, path: Path, text: str) -> None:
        """Atomically: a temp file no runtime loads, then rename."""
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(text)
        os.replace(temp, path)

    def returned(self, result: dict[str, Any]) -> tuple[list[str], str]:
        """(request names, pool) returned for one allocation result."""
        return [result["request"]], result["pool"]

    async def fetch_failed(self, context: Any, message: str) -> str:
        await context.abort(grpc.StatusCode.UNKNOWN, f"get resource claims: {message}")
        raise AssertionError("abort returns by raising")


class UnqualifiedCDIIds(ReferenceDriver):
    """Returns bare device names ("gpu0") as CDI ids."""

    def cdi_id(self, uid: str, device: str) -> str:
        return device.replace("-", "")


class CollidingCDIIds(ReferenceDriver):
    """Gives every claim the same CDI id, each in its own spec file: unpreparing one claim
    leaves the id resolvable through another claim's spec."""

    def cdi_id(self, uid: str, device: str) -> str:
        return f"{CDI_KIND}=gpu"


class DevicesNotAsAllocated(ReferenceDriver):
    """Returns the right devices without their request names (the kubelet then cannot tell
    which container gets which CDI device)."""

    def returned(self, result: dict[str, Any]) -> tuple[list[str], str]:
        return [], result["pool"]


class LosesStateOnRestart(ReferenceDriver):
    """Keeps prepared claims in memory only; ids carry a per-process nonce, so a prepare
    after a restart hands out new ids for a claim a container may already use."""

    def __init__(self, api: ApiServer, root: Path) -> None:
        super().__init__(api, root)
        self.nonce = secrets.token_hex(2)

    def load_state(self) -> None:
        self.nonce = secrets.token_hex(2)

    def save_state(self) -> None:
        pass

    def cdi_id(self, uid: str, device: str) -> str:
        return f"{CDI_KIND}={uid}-{device}-{self.nonce}"


class InPlaceSpecWrites(ReferenceDriver):
    """Writes spec files under their final name, where a runtime can read them half-written."""

    def write_spec(self, path: Path, text: str) -> None:
        path.write_text(text)


class V1Only(ReferenceDriver):
    """Correct, but advertises only v1.DRAPlugin: 1.32/1.33 kubelets cannot use it."""

    def info(self) -> pluginregistration_v1_pb2.PluginInfo:
        info = super().info()
        del info.supported_versions[1:]
        return info


BROKEN_DRIVERS: dict[str, type[ReferenceDriver]] = {
    "colliding-cdi-ids": CollidingCDIIds,
    "devices-not-as-allocated": DevicesNotAsAllocated,
    "loses-state-on-restart": LosesStateOnRestart,
    "in-place-spec-writes": InPlaceSpecWrites,
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
            for device in devices:
                entry.devices.add(
                    request_names=device.request_names,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=[device.cdi_id],
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
