"""A node with the example driver's files, an engine that prepared real claims through the
API stand-in, and ``audit`` to run what ``dralet audit`` runs against it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from dralet import kube
from dralet.apiserver import ApiServer
from dralet.checkpoint.model import ClaimRecord, ClaimState
from dralet.cli import audit as audit_cli
from dralet.cluster import ControlPlane
from dralet.drivers.example import SimulatedGPUs
from dralet.kube import access
from dralet.kubelet import KubeletClaim
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims import ClaimEngine
from dralet.node.claims.calls import finalizer_name
from dralet.node.settings import DriverSettings
from dralet.testing import node_settings
from dralet.testing.claims import DRIVER, NODE
from tests import claimstore

FINALIZER = finalizer_name(DRIVER)


@dataclass
class AuditedNode:
    root: Path
    settings: DriverSettings
    backend: SimulatedGPUs
    api: ApiServer
    cluster: ControlPlane
    engine: ClaimEngine

    @property
    def state_dir(self) -> Path:
        return self.root / "backend"

    def records(self) -> dict[str, ClaimRecord]:
        return claimstore.records(self.settings.plugin_dir)

    def put_record(self, record: ClaimRecord) -> None:
        claimstore.put_record(self.settings.plugin_dir, record)

    async def prepare(self, name: str, *devices: str) -> KubeletClaim:
        ref = self.cluster.allocate_claim(name, [("gpu", d) for d in devices])
        outcome = await self.engine.prepare([ClaimRef(ClaimUID(ref.uid), ref.namespace, name)])
        assert outcome[ref.uid].error == ""
        return ref

    def set_state(self, uid: str, state: ClaimState) -> None:
        self.put_record(replace(self.records()[uid], state=state))

    def set_finalizers(self, ref: KubeletClaim, finalizers: Sequence[str]) -> None:
        self.api.patch(
            "ResourceClaim",
            ref.name,
            {"metadata": {"finalizers": list(finalizers)}},
            namespace=ref.namespace,
        )

    async def audit(
        self,
        *,
        fix: bool = False,
        backend: bool = True,
        api: bool = True,
        accept_lost_store: bool = False,
    ) -> audit_cli.AuditResult:
        return await audit_cli.run_audit(
            self.settings,
            backend=audit_cli.BackendChoice(
                "example", self.state_dir, SimulatedGPUs(state_dir=self.state_dir, node_name=NODE)
            )
            if backend
            else None,
            api=access.resolve(url=self.api.url) if api else None,
            fix=fix,
            accept_lost_store=accept_lost_store,
        )

    async def kinds(self, **options: Any) -> list[str]:
        return [f.kind for f in (await self.audit(**options)).findings]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[AuditedNode]:
    settings = node_settings(tmp_path)
    backend = SimulatedGPUs(state_dir=tmp_path / "backend", node_name=NODE)
    async with ApiServer() as api:
        cluster = ControlPlane(api, driver_name=DRIVER, node_name=NODE)
        cluster.add_node()
        client = await kube.connect(url=api.url)
        try:
            engine = ClaimEngine(settings, backend=backend, claims=kube.ClaimClient(client))
            await engine.recover()
            yield AuditedNode(tmp_path, settings, backend, api, cluster, engine)
        finally:
            await client.close()
