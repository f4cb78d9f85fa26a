"""Structured logs: every line of a claim's call carries the claim and the request id."""

from __future__ import annotations

import io
import json
import logging

import pytest

from dralet import logs
from dralet.testing.claims import allocated_claim
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


async def test_plain_stdlib_handlers_see_the_claim_too(node: Node) -> None:
    """An author's own logging setup (no dralet formatter) still shows each line's claim."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("dralet")
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        claim = node.claims.add(allocated_claim("plain"))
        await node.plugin.prepare([kclaim(claim)])
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    uid = claim["metadata"]["uid"]
    prepared = [line for line in stream.getvalue().splitlines() if " prepared" in line]
    assert prepared, stream.getvalue()
    for line in prepared:
        assert f"claim_uid={uid}" in line, line
        assert "claim=default/plain" in line, line


def test_dralet_formatters_print_context_once() -> None:
    record_stream = io.StringIO()
    handler = logging.StreamHandler(record_stream)
    handler.setFormatter(logs.KeyValueFormatter())
    log = logging.getLogger("dralet.test.once")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with logs.bind(claim_uid="u-1", claim="ns/n"):
            log.info("step %s of %d%%", "one", 50)
    finally:
        log.removeHandler(handler)
    line = record_stream.getvalue().strip()
    assert line.count("claim_uid=u-1") == 1, line
    assert "step one of 50%" in line, line


async def test_a_failed_claims_log_line_says_what_failed_once(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dralet.node.claims")
    original = node.backend.prepare

    async def failing(claim: object, device: object) -> object:
        raise OSError(28, "No space left on device")

    node.backend.prepare = failing  # type: ignore[method-assign,assignment]
    try:
        claim = node.claims.add(allocated_claim("full"))
        result = await node.plugin.prepare([kclaim(claim)])
    finally:
        node.backend.prepare = original  # type: ignore[method-assign]
    assert result.claims[claim["metadata"]["uid"]].error
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed, caplog.text
    for line in failed:
        assert "prepare failed: prepare failed" not in line, line
