"""Structured logs: every line of a claim's call carries the claim and the request id."""

from __future__ import annotations

import io
import json
import logging

from dralet import logs
from tests.claimfakes import allocated_claim
from tests.node.conftest import Node
from tests.node.test_prepare import kclaim


async def test_every_line_of_a_call_carries_claim_and_request_id(node: Node) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JSONFormatter())
    root = logging.getLogger("dralet")
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    backend_log = logging.getLogger("dralet.drivers.under_test")
    original = node.backend.prepare

    async def chatty_prepare(claim: object, device: object) -> object:
        backend_log.info("backend preparing %s", getattr(device, "device", "?"))
        return await original(claim, device)  # type: ignore[arg-type]

    node.backend.prepare = chatty_prepare  # type: ignore[method-assign,assignment]
    try:
        good = node.claims.add(allocated_claim("good"))
        bad = node.claims.add(allocated_claim("bad", driver="other.example.com"))
        await node.plugin.prepare([kclaim(good), kclaim(bad)])
        await node.plugin.unprepare([kclaim(good)])
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    ledger_lines = [
        line for line in lines if line["logger"] in ("dralet.node.claims", backend_log.name)
    ]
    assert any(line["logger"] == backend_log.name for line in ledger_lines)
    assert {line["msg"].split(" ")[0] for line in ledger_lines} >= {
        "prepared",
        "prepare",
        "unprepared",
    }
    for line in ledger_lines:
        assert line["request_id"], line
        assert line["rpc"] in ("NodePrepareResources", "NodeUnprepareResources"), line
        assert line["claim"] in ("default/good", "default/bad"), line
        uid = (good if line["claim"] == "default/good" else bad)["metadata"]["uid"]
        assert line["claim_uid"] == uid, line
    request_ids = {line["rpc"]: line["request_id"] for line in ledger_lines}
    assert len(set(request_ids.values())) == 2  # one id per call
