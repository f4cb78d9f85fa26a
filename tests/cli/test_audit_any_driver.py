"""``dralet audit --driver NAME`` with a third-party driver (the ``acme-fpga`` example
package): the backend is built by the driver's own factory, as ``dralet run`` builds it,
so the held devices are the ones its ``devices_in_use()`` reports, and ``--fix`` removes
an orphan CDI spec of the driver's kind while the held devices stay held."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests import claimstore

from dralet import kube
from dralet.apiserver import ApiServerThread
from dralet.cli import main
from dralet.cluster import ControlPlane
from dralet.node import factory
from dralet.node.backend import ClaimBackend, ClaimRef, ClaimUID
from dralet.node.claims import ClaimEngine
from dralet.node.claims.calls import Invoker
from dralet.node.config import Settings
from dralet.node.settings import DriverSettings

ACME = "fpga.acme.example.com"
NODE = "node-a"


@dataclass
class AcmeNode:
    root: Path
    api: ApiServerThread

    @property
    def settings(self) -> DriverSettings:
        return DriverSettings(
            driver_name=ACME,
            node_name=NODE,
            plugin_dir=self.root / "plugins" / ACME,
            cdi_dir=self.root / "cdi",
        )

    def backend(self) -> ClaimBackend:
        """Built the way ``dralet run --driver acme-fpga`` builds it."""
        settings = Settings(driver=self.settings, publish=False)
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        _, make = factory.find("acme-fpga")
        return factory.build("acme-fpga", make, settings, factory.DriverConfig())

    def held(self) -> dict[str, str]:
        """Device → holder, asked of the backend as the driver asks it."""
        in_use = asyncio.run(Invoker(self.backend()).devices_in_use())
        return {device: ",".join(sorted(holders)) for device, holders in in_use.items()}

    def prepare(self, name: str, device: str) -> str:
        cluster = ControlPlane(self.api.server, driver_name=ACME)
        ref = self.api.call(cluster.allocate_claim, name, [("fpga", device)])

        async def run() -> None:
            async with await kube.connect(url=self.api.url) as client:
                engine = ClaimEngine(
                    self.settings, backend=self.backend(), claims=kube.ClaimClient(client)
                )
                await engine.recover()
                claim = ClaimRef(ClaimUID(ref.uid), ref.namespace, ref.name)
                assert (await engine.prepare([claim]))[ref.uid].error == ""

        asyncio.run(run())
        return ref.uid

    def orphan_spec(self, like: str) -> Path:
        """A spec of the driver's kind, left by a claim the node has no record of."""
        text = (self.settings.cdi_dir / f"{ACME}-claim_{like}.json").read_text()
        orphan = str(uuid.uuid4())
        path = self.settings.cdi_dir / f"{ACME}-claim_{orphan}.json"
        path.write_text(text.replace(like, orphan))
        return path

    def args(self, *extra: str) -> list[str]:
        return [
            "audit",
            "--driver", "acme-fpga",
            "--driver-name", ACME,
            "--node-name", NODE,
            "--plugin-dir", str(self.settings.plugin_dir),
            "--cdi-dir", str(self.settings.cdi_dir),
            "--api-url", self.api.url,
            *extra,
        ]  # fmt: skip


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AcmeNode]:
    with ApiServerThread() as api:
        api.call(ControlPlane(api.server, driver_name=ACME).add_node)
        yield AcmeNode(tmp_path, api)


def audit(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main.cli, [*args, "-o", "json"])
    assert result.stdout, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, document


def test_the_audit_of_a_third_party_driver_counts_what_it_holds(node: AcmeNode) -> None:
    train, infer = node.prepare("train", "fpga-0"), node.prepare("infer", "fpga-1")
    assert node.held() == {"fpga-0": train, "fpga-1": infer}

    code, document = audit(*node.args())
    assert code == 0, document
    backend = document["sources"]["backend"]
    assert backend["inspected"] is True
    assert backend["driver"] == "acme-fpga (acme_fpga.driver:factory)"
    assert backend["devicesInUse"] == 2
    assert backend["stateDir"] == str(node.settings.plugin_dir / "backend")
    assert document["findings"] == []
    assert document["sources"]["checkpoint"]["claims"] == 2


def test_a_device_the_backend_no_longer_holds_is_found(node: AcmeNode) -> None:
    node.prepare("train", "fpga-0")
    (node.settings.plugin_dir / "backend" / "fpgas.json").write_text("{}")
    code, document = audit(*node.args())
    assert code == 1
    assert [f["kind"] for f in document["findings"]] == ["device-not-held"]


def test_fix_removes_an_orphan_spec_of_any_driver(node: AcmeNode) -> None:
    train = node.prepare("train", "fpga-0")
    orphan = node.orphan_spec(like=train)

    code, document = audit(*node.args())
    assert code == 1
    assert len(document["findings"]) == 1, document["findings"]
    [finding] = document["findings"]
    assert finding["kind"] == "orphan-spec"
    assert orphan.exists()

    code, document = audit(*node.args("--fix"))
    assert code == 0, document
    assert document["fix"]["actions"] == [
        {"action": "orphan-spec-removed", "subject": orphan.name.split("_")[1][: -len(".json")]}
    ]
    assert not orphan.exists()
    assert node.held() == {"fpga-0": train}  # the held device stays held
    assert (node.settings.cdi_dir / f"{ACME}-claim_{train}.json").exists()


def test_a_missing_plugin_dir_is_an_error(node: AcmeNode) -> None:
    result = CliRunner().invoke(main.cli, node.args())
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"dralet audit: plugin dir {node.settings.plugin_dir}: no such directory (no driver "
        f"{ACME} has run on this node; check --plugin-dir and --driver-name)"
    ]


def test_a_plugin_dir_without_records_is_an_error(node: AcmeNode) -> None:
    node.settings.plugin_dir.mkdir(parents=True)
    result = CliRunner().invoke(main.cli, node.args())
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"dralet audit: {node.settings.store_path}: no claim records (driver {ACME} has not "
        "started with this plugin dir; a started driver always has them)"
    ]


def test_an_unknown_driver_is_an_error(node: AcmeNode) -> None:
    claimstore.create_store(node.settings.plugin_dir)
    args = node.args()
    args[args.index("acme-fpga")] = "acme-fgpa"
    result = CliRunner().invoke(main.cli, args)
    assert result.exit_code == 2
    assert "unknown driver 'acme-fgpa' (available: acme-fpga, example" in result.stderr


def test_driver_comes_from_the_environment_like_run(node: AcmeNode) -> None:
    node.prepare("train", "fpga-0")
    args = node.args()
    del args[1:3]  # no --driver: $DRALET_DRIVER, as the DaemonSet sets it for dralet run
    result = CliRunner(env={"DRALET_DRIVER": "acme-fpga"}).invoke(main.cli, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sources"]["backend"]["devicesInUse"] == 1
