"""``dralet audit --fix --accept-lost-store`` as a command, on a node whose record
database was deleted (its marker left): without the flag the audit reports and changes
nothing; with it a new store is started and the lost claim's spec and device go."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from dralet.cli import main
from tests.recovery.nodekit import EngineNode


def _node_with_deleted_store(root: Path) -> EngineNode:
    async def prepare() -> EngineNode:
        node = EngineNode.create(root)
        await node.engine.recover()
        ref = node.add_claim("kept", "gpu-1")
        assert (await node.prepare(ref))[ref.uid].error == ""
        node.engine.store.shutdown()
        return node

    node = asyncio.run(prepare())
    for entry in node.settings.plugin_dir.glob("claims.db*"):
        if entry.name != "claims.db.created":
            entry.unlink()
    return node


def _audit(node: EngineNode, *extra: str) -> tuple[int, str, str]:
    args = [
        "audit",
        "--node-name", node.settings.node_name,
        "--plugin-dir", str(node.settings.plugin_dir),
        "--cdi-dir", str(node.settings.cdi_dir),
        "--boot-id-file", str(node.settings.boot_id_path),
        "--driver", "example",
        "--state-dir", str(node.root / "gpus"),
        *extra,
    ]  # fmt: skip
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main.cli, args)
    return result.exit_code, result.stdout, result.stderr


def test_a_deleted_store_is_reported_then_replaced_once_accepted(tmp_path: Path) -> None:
    node = _node_with_deleted_store(tmp_path)

    code, out, _ = _audit(node, "--output", "json")
    assert code == 1, out
    (finding,) = json.loads(out)["findings"]
    assert finding["kind"] == "corrupt-checkpoint"
    assert "is missing, but this node had a claim store" in finding["message"]
    assert "--accept-lost-store" in finding["message"]
    code, out, _ = _audit(node, "--fix")
    assert code == 1, out
    assert list(node.settings.cdi_dir.glob("*.json")) != []

    code, out, _ = _audit(node, "--fix", "--accept-lost-store")
    assert code == 0, out
    assert "lost-store-accepted" in out
    assert list(node.settings.cdi_dir.glob("*.json")) == []
    assert node.settings.store_path.is_file()


def test_accept_lost_store_is_a_repair(tmp_path: Path) -> None:
    node = _node_with_deleted_store(tmp_path)
    code, _, err = _audit(node, "--accept-lost-store")
    assert code == 2
    assert "pass --fix with it" in err
