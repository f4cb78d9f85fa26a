"""``dralet conformance`` against small drivers that each break one rule: exactly the
cases for that rule fail, by name; the reference driver they are built from passes."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from dralet import kube
from dralet.testing import conformance
from dralet.testing.apiserver import ApiServer
from dralet.testing.cluster import ControlPlane
from tests.conformance.broken_drivers import (
    BROKEN_DRIVERS,
    DRIVER,
    NODE,
    ReferenceDriver,
)

EXPECTED_FAILURES = {
    "non-idempotent-unprepare": ["unprepare.twice"],
    "not-found-on-unknown-claim": ["unprepare.unknown-claim", "unprepare.twice"],
    "whole-call-error": ["prepare.per-claim-error"],
    "unqualified-cdi-ids": ["cdi.qualified-ids", "cdi.resolvable"],
}
CLI_TIMEOUT = 60.0


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer() as server:
        ControlPlane(server, driver_name=DRIVER, node_name=NODE).add_node()
        yield server


async def _suite(
    driver: ReferenceDriver, api: ApiServer, **overrides: object
) -> conformance.SuiteResult:
    settings = conformance.ConformanceSettings(
        registration_socket=driver.registration_socket,
        driver_name=DRIVER,
        cdi_dir=driver.cdi_dir,
        node_name=NODE,
        **overrides,  # type: ignore[arg-type]
    )
    async with await kube.connect(url=api.url) as client:
        factory = conformance.ApiClaimFactory(client, node_name=NODE, pool=NODE)
        return await conformance.run_suite(settings, claims=factory)


async def test_the_reference_driver_passes_every_case(api: ApiServer, tmp_path: Path) -> None:
    driver = ReferenceDriver(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api)
    finally:
        await driver.stop()
    assert [c.name for c in result.cases] == list(conformance.CASE_NAMES)
    assert result.failed() == [], result.to_json()
    assert all(c.status == "pass" for c in result.cases)
    assert (result.driver, result.service) == (DRIVER, "v1.DRAPlugin")
    assert api.list("ResourceClaim") == []


@pytest.mark.parametrize("kind", sorted(BROKEN_DRIVERS))
async def test_each_broken_driver_fails_exactly_its_cases(
    api: ApiServer, tmp_path: Path, kind: str
) -> None:
    driver = BROKEN_DRIVERS[kind](api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api)
    finally:
        await driver.stop()
    assert result.failed() == EXPECTED_FAILURES[kind], result.to_json()
    assert not result.passed


async def test_unqualified_ids_leave_spec_removal_unchecked(api: ApiServer, tmp_path: Path) -> None:
    driver = BROKEN_DRIVERS["unqualified-cdi-ids"](api, tmp_path)
    await driver.start()
    try:
        cases = {c.name: c for c in (await _suite(driver, api)).cases}
    finally:
        await driver.stop()
    assert "'gpu0' is not a qualified CDI device name" in cases["cdi.qualified-ids"].message
    assert cases["cdi.spec-removed"].status == "skip"


async def test_whole_call_error_names_the_grpc_status(api: ApiServer, tmp_path: Path) -> None:
    driver = BROKEN_DRIVERS["whole-call-error"](api, tmp_path)
    await driver.start()
    try:
        cases = {c.name: c for c in (await _suite(driver, api)).cases}
    finally:
        await driver.stop()
    assert cases["prepare.per-claim-error"].message.startswith("gRPC error UNKNOWN")


async def test_a_1_32_kubelet_runs_the_cases_on_v1beta1(api: ApiServer, tmp_path: Path) -> None:
    driver = ReferenceDriver(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api, kubelet_version="1.32")
    finally:
        await driver.stop()
    assert result.service == "v1beta1.DRAPlugin"
    assert result.failed() == []


async def test_no_driver_fails_every_case_without_hanging(api: ApiServer, tmp_path: Path) -> None:
    settings = conformance.ConformanceSettings(
        registry_dir=tmp_path / "empty", node_name=NODE, discovery_timeout=0.2
    )
    async with await kube.connect(url=api.url) as client:
        factory = conformance.ApiClaimFactory(client, node_name=NODE, pool=NODE)
        result = await conformance.run_suite(settings, claims=factory)
    assert result.failed() == list(conformance.CASE_NAMES)
    assert "no plugin registered" in result.cases[0].message


async def test_command_exit_status_json_and_junit(api: ApiServer, tmp_path: Path) -> None:
    driver = BROKEN_DRIVERS["not-found-on-unknown-claim"](api, tmp_path)
    await driver.start()
    junit = tmp_path / "junit.xml"
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dralet.cli.main", "conformance",
            "--socket", str(driver.registration_socket),
            "--api-url", api.url,
            "--cdi-dir", str(driver.cdi_dir),
            "--driver-name", DRIVER,
            "--junit", str(junit),
            "-o", "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
    finally:
        await driver.stop()
    assert process.returncode == 1, err.decode()
    document = json.loads(out)
    assert document["passed"] is False
    assert [c["name"] for c in document["cases"] if c["status"] == "fail"] == EXPECTED_FAILURES[
        "not-found-on-unknown-claim"
    ]
    assert set(document["cases"][0]) == {"name", "status", "message", "seconds"}
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == str(len(conformance.CASES))
    assert suite.get("failures") == "2"
    failed = [
        case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == EXPECTED_FAILURES["not-found-on-unknown-claim"]
    message = suite.find("testcase[@name='unprepare.unknown-claim']/failure")
    assert message is not None and "NOT_FOUND" in (message.get("message") or "")
