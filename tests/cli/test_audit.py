"""``dralet audit`` invoked as a command: exit statuses, the table (fits the terminal),
the dry run that says what ``--fix`` would do, ``--fix`` itself and the JSON shape."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests import claimstore

from dralet import kube
from dralet.apiserver import ApiServerThread
from dralet.cli import main
from dralet.cli.audit import render_table
from dralet.cluster import ControlPlane
from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletClaim
from dralet.node.backend import ClaimRef, ClaimUID
from dralet.node.claims import ClaimEngine
from dralet.node.settings import DriverSettings

DRIVER = "gpu.example.com"
NODE = "node-a"
NARROW = 72
FINDING_FIELDS = {"kind", "subject", "message", "repair", "namespace", "name", "action", "by"}


@dataclass
class Node:
    root: Path
    api: ApiServerThread

    @property
    def settings(self) -> DriverSettings:
        return DriverSettings(
            driver_name=DRIVER,
            node_name=NODE,
            plugin_dir=self.root / "plugins" / DRIVER,
            cdi_dir=self.root / "cdi",
            boot_id_path=self.root / "boot_id",
        )

    def reboot(self, boot_id: str) -> None:
        self.settings.boot_id_path.write_text(f"{boot_id}\n")

    def node_args(self) -> list[str]:
        claimstore.create_store(self.settings.plugin_dir)
        return [
            "audit",
            "--node-name", NODE,
            "--plugin-dir", str(self.settings.plugin_dir),
            "--cdi-dir", str(self.settings.cdi_dir),
            "--boot-id-file", str(self.settings.boot_id_path),
        ]  # fmt: skip

    def full_args(self) -> list[str]:
        return [
            *self.node_args(),
            "--driver", "example",
            "--state-dir", str(self.root / "backend"),
            "--api-url", self.api.url,
        ]  # fmt: skip

    def prepare(self, name: str, device: str) -> KubeletClaim:
        cluster = ControlPlane(self.api.server)
        ref = self.api.call(cluster.allocate_claim, name, [("gpu", device)])

        async def run() -> None:
            backend = SimulatedGPUs(state_dir=self.root / "backend", node_name=NODE)
            async with await kube.connect(url=self.api.url) as client:
                ledger = ClaimEngine(
                    self.settings, backend=backend, claims=kube.ClaimClient(client)
                )
                await ledger.recover()
                ref_ = ClaimRef(ClaimUID(ref.uid), ref.namespace, ref.name)
                assert (await ledger.prepare([ref_]))[ref.uid].error == ""

        asyncio.run(run())
        return ref

    def plant_orphan_spec(self) -> str:
        uid = str(uuid.uuid4())
        cdi = self.settings.cdi_dir
        cdi.mkdir(parents=True, exist_ok=True)
        (cdi / f"{DRIVER}-claim_{uid}.json").write_text("{}")
        return uid

    def drop_finalizer(self, ref: KubeletClaim) -> None:
        self.api.patch(
            "ResourceClaim", ref.name, {"metadata": {"finalizers": []}}, namespace=ref.namespace
        )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with ApiServerThread() as api:
        api.call(ControlPlane(api.server).add_node)
        node = Node(tmp_path, api)
        node.reboot("boot-1")
        yield node


def audit(*args: str, columns: int = 200) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(main.cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_clean_node_exits_0_and_says_what_was_not_inspected(node: Node) -> None:
    code, out, _ = audit(*node.node_args())
    assert code == 0, out
    assert "No inconsistencies found." in out
    assert "not inspected: pass --driver NAME" in out
    assert "not consulted: no API access (--kubeconfig, $KUBECONFIG" in out


def test_dry_run_reports_and_changes_nothing_then_fix_repairs(node: Node) -> None:
    ref = node.prepare("train", "gpu-0")
    node.drop_finalizer(ref)
    orphan = node.plant_orphan_spec()
    before = sorted(p.name for p in node.settings.cdi_dir.iterdir())

    code, out, _ = audit(*node.full_args())
    assert code == 1, out
    assert "Dry run: --fix would repair 3 of 3" in out
    assert sorted(p.name for p in node.settings.cdi_dir.iterdir()) == before
    code, out, _ = audit(*node.full_args(), columns=NARROW)
    assert code == 1, out
    assert "3 inconsistencies found:" in out
    assert ["KIND", "SUBJECT", "PROBLEM", "REPAIR"] in [line.split() for line in out.splitlines()]
    assert all(len(line) <= NARROW for line in out.splitlines()), out
    assert sorted(p.name for p in node.settings.cdi_dir.iterdir()) == before

    code, out, _ = audit(*node.full_args(), "--fix", columns=NARROW)
    assert code == 0, out
    assert "Repaired:" in out and "orphan-spec-removed" in out and "finalizer-restored" in out
    assert "REPAIRED" in out
    assert "Audit after the repair: no inconsistencies." in out
    assert all(len(line) <= NARROW for line in out.splitlines()), out
    assert not (node.settings.cdi_dir / f"{DRIVER}-claim_{orphan}.json").exists()

    code, out, _ = audit(*node.full_args())
    assert code == 0, out


def test_the_boot_id_file_is_the_drivers(node: Node) -> None:
    """Read from the file ``dralet run`` reads: unchanged, a prepared claim is consistent;
    changed (a reboot the driver has not started after), it is due for revalidation."""
    ref = node.prepare("train", "gpu-0")
    code, out, _ = audit(*node.full_args(), "-o", "json")
    assert code == 0, out
    node.reboot("boot-2")
    code, out, _ = audit(*node.full_args(), "-o", "json")
    assert code == 1, out
    findings = json.loads(out)["findings"]
    assert [(f["kind"], f["subject"], f["by"]) for f in findings] == [
        ("not-revalidated", ref.uid, "start")
    ]
    code, out, _ = audit(*node.full_args(), "--fix")
    assert code == 0, out
    code, out, _ = audit(*node.full_args())
    assert code == 0, out


def test_json_shape(node: Node) -> None:
    ref = node.prepare("train", "gpu-1")
    node.drop_finalizer(ref)
    code, out, _ = audit(*node.full_args(), "-o", "json")
    assert code == 1
    document = json.loads(out)
    assert set(document) == {"driver", "node", "pool", "sources", "findings", "fix", "consistent"}
    assert (document["driver"], document["node"], document["pool"]) == (DRIVER, NODE, NODE)
    assert document["consistent"] is False
    sources = document["sources"]
    assert sources["checkpoint"] == {
        "path": str(node.settings.store_path),
        "claims": 1,
        "error": "",
    }
    assert sources["cdi"] == {
        "dir": str(node.settings.cdi_dir),
        "kind": f"{DRIVER}/claim",
        "specs": 1,
    }
    assert sources["backend"] == {
        "inspected": True,
        "driver": "example (dralet.drivers.example.factory:factory)",
        "stateDir": str(node.root / "backend"),
        "devicesInUse": 1,
        "note": "",
    }
    assert sources["api"] == {"consulted": True, "server": node.api.url, "claims": 1}
    [finding] = document["findings"]
    assert set(finding) == FINDING_FIELDS
    assert (finding["kind"], finding["subject"], finding["repair"]) == (
        "prepared-without-finalizer",
        ref.uid,
        "add the finalizer",
    )
    assert document["fix"] == {"applied": False, "actions": [], "failClosed": "", "remaining": []}

    code, out, _ = audit(*node.full_args(), "-o", "json", "--fix")
    assert code == 0
    fixed = json.loads(out)
    assert fixed["fix"]["applied"] is True
    assert fixed["fix"]["actions"] == [{"action": "finalizer-restored", "subject": ref.uid}]
    assert fixed["fix"]["remaining"] == [] and fixed["consistent"] is True


def test_json_without_backend_or_api(node: Node) -> None:
    code, out, _ = audit(*node.node_args(), "-o", "json")
    assert code == 0
    sources = json.loads(out)["sources"]
    assert sources["backend"]["inspected"] is False
    assert "pass --driver NAME" in sources["backend"]["note"]
    assert sources["api"] == {"consulted": False, "server": None, "claims": None}


def test_fix_that_cannot_repair_everything_exits_1(node: Node) -> None:
    node.prepare("train", "gpu-0")
    claimstore.damage_store(node.settings.store_path, b"garbage")
    code, out, _ = audit(*node.full_args(), "--fix")
    assert code == 1, out
    assert "corrupt-checkpoint" in out and "needs a person" in out
    assert "the driver fails closed" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--fix"], "--fix releases devices through the driver's backend: pass --driver"),
        (["--api-url", "http://127.0.0.1:1", "--in-cluster"], "use only one of"),
        (["--cdi-class", "Bad Class"], "--driver-name/--cdi-class"),
    ],
)
def test_usage_errors_exit_2(node: Node, extra: list[str], message: str) -> None:
    code, _, err = audit(*node.node_args(), *extra)
    assert code == 2
    assert message in err


def test_api_that_cannot_be_reached_exits_2(node: Node) -> None:
    code, _, err = audit(*node.node_args(), "--kubeconfig", str(node.root / "missing.yaml"))
    assert code == 2
    assert "cannot connect to the API server" in err


def test_missing_node_name_is_a_usage_error() -> None:
    code, _, err = audit("audit")
    assert code == 2 and "--node-name" in err


@pytest.mark.parametrize("width", [40, 60, 100])
def test_tables_never_exceed_the_width_and_keep_uids_whole_when_they_fit(width: int) -> None:
    uid = str(uuid.uuid4())
    rows = [["claim-gone", uid, "ResourceClaim default/notebook no longer exists", "unprepare"]]
    table = render_table(["KIND", "SUBJECT", "PROBLEM", "REPAIR"], rows, width=width)
    assert max(len(line) for line in table.splitlines()) <= width
    assert (uid in table) == (width >= 100)
