"""``dralet conformance`` against small drivers that each break one rule: exactly the
cases for that rule fail, by name and level; the reference driver they are built from
passes every case at both levels."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from dralet import conformance, kube
from dralet.apiserver import ApiServer
from dralet.cluster import ControlPlane
from tests.conformance.broken_drivers import (
    BROKEN_DRIVERS,
    DRIVER,
    NODE,
    ReferenceDriver,
    V1Only,
)

EXPECTED_FAILURES = {
    "non-idempotent-unprepare": ["unprepare.twice", "restart.unprepare-idempotent"],
    "not-found-on-unknown-claim": [
        "unprepare.unknown-claim",
        "unprepare.twice",
        "restart.unprepare-idempotent",
    ],
    "whole-call-error": ["prepare.per-claim-error"],
    "unqualified-cdi-ids": ["cdi.qualified-ids", "cdi.resolvable"],
    "colliding-cdi-ids": ["cdi.unique-ids"],
    "devices-not-as-allocated": ["prepare.devices-match-allocation"],
    "loses-state-on-restart": ["restart.state-kept"],
    "in-place-spec-writes": ["cdi.atomic-write"],
}
SHOULD_ONLY = {"whole-call-error", "in-place-spec-writes"}
CLI_TIMEOUT = 60.0


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer() as server:
        ControlPlane(server, driver_name=DRIVER, node_name=NODE).add_node()
        yield server


async def _suite(
    driver: ReferenceDriver, api: ApiServer, **overrides: object
) -> conformance.SuiteResult:
    options: dict[str, object] = {
        "kubelet_versions": ("1.34",),
        "devices": ("gpu-0", "gpu-1"),
        "restart": driver.restart,
        **overrides,
    }
    settings = conformance.ConformanceSettings(
        registration_socket=driver.registration_socket,
        driver_name=DRIVER,
        cdi_dir=driver.cdi_dir,
        node_name=NODE,
        **options,  # type: ignore[arg-type]
    )
    async with await kube.connect(url=api.url) as client:
        factory = conformance.ApiClaimFactory(client, node_name=NODE)
        return await conformance.run_suite(settings, claims=factory)


async def test_the_reference_driver_passes_every_case(api: ApiServer, tmp_path: Path) -> None:
    driver = ReferenceDriver(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api, kubelet_versions=("1.32", "1.34"), strict=True)
    finally:
        await driver.stop()
    registration = [c.name for c in conformance.CASES if c.scope == "driver"]
    per_kubelet = [c.name for c in conformance.CASES if c.scope == "kubelet"]
    assert [c.label for c in result.cases] == registration + [
        f"{name}@{version}" for version in ("1.32", "1.34") for name in per_kubelet
    ]
    assert result.failed() == [], result.to_json()
    assert all(c.status == "pass" for c in result.cases), result.to_json()
    assert result.driver == DRIVER
    assert result.services == (("1.32", "v1beta1.DRAPlugin"), ("1.34", "v1.DRAPlugin"))
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
    levels = {c.level for c in result.cases if c.status == "fail"}
    assert levels == ({"SHOULD"} if kind in SHOULD_ONLY else {"MUST"})
    # MUST failures fail the run; SHOULD failures only with strict.
    assert result.passed is (kind in SHOULD_ONLY)
    strict = conformance.SuiteResult(result.cases, strict=True)
    assert not strict.passed


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
        result = await _suite(driver, api, kubelet_versions=("1.32",))
    finally:
        await driver.stop()
    assert result.services == (("1.32", "v1beta1.DRAPlugin"),)
    assert result.failed() == []


async def test_no_driver_is_a_setup_error_without_hanging(api: ApiServer, tmp_path: Path) -> None:
    settings = conformance.ConformanceSettings(
        registry_dir=tmp_path / "empty", node_name=NODE, discovery_timeout=0.2
    )
    async with await kube.connect(url=api.url) as client:
        factory = conformance.ApiClaimFactory(client, node_name=NODE)
        with pytest.raises(conformance.SetupError, match=r"no driver registered at .*within 0\.2s"):
            await conformance.run_suite(settings, claims=factory)


async def test_versions_the_driver_does_not_advertise_are_skipped(
    api: ApiServer, tmp_path: Path
) -> None:
    driver = V1Only(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api, kubelet_versions=("1.32", "1.34"), restart=None)
    finally:
        await driver.stop()
    old = [c for c in result.cases if c.kubelet == "1.32"]
    assert old and {c.status for c in old} == {"skip"}
    assert "would fall back to v1alpha3.NodeService" in old[0].message
    assert result.services == (("1.34", "v1.DRAPlugin"),)
    assert result.failed() == [] and result.passed


async def test_default_kubelets_are_those_the_driver_advertises(
    api: ApiServer, tmp_path: Path
) -> None:
    driver = V1Only(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api, kubelet_versions=(), restart=None)
    finally:
        await driver.stop()
    assert [k for k, _ in result.services] == ["1.34", "1.35", "1.36", "1.37", "1.38"]


async def test_devices_come_from_the_published_slice(api: ApiServer, tmp_path: Path) -> None:
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": "pool-x", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": n} for n in ("gpu-7", "gpu-8", "gpu-9")],
            },
        }
    )
    driver = ReferenceDriver(api, tmp_path)
    await driver.start()
    try:
        result = await _suite(driver, api, devices=(), restart=None)
    finally:
        await driver.stop()
    assert result.failed() == [], result.to_json()
    twice = next(c for c in result.cases if c.name == "prepare.twice")
    assert twice.message.endswith("-gpu-7")


async def test_no_published_devices_is_a_setup_error(api: ApiServer, tmp_path: Path) -> None:
    driver = ReferenceDriver(api, tmp_path)
    await driver.start()
    try:
        with pytest.raises(conformance.SetupError, match=r"published no ResourceSlice.*--device"):
            await _suite(driver, api, devices=(), discovery_timeout=0.3)
    finally:
        await driver.stop()


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
            "--device", "gpu-0", "--device", "gpu-1",
            "--kubelet-version", "1.34",
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
    expected = EXPECTED_FAILURES["not-found-on-unknown-claim"][:2]  # no restart command
    assert [c["name"] for c in document["cases"] if c["status"] == "fail"] == expected
    assert set(document["cases"][0]) == {"name", "level", "kubelet", "status", "message", "seconds"}
    assert {c["level"] for c in document["cases"] if c["status"] == "fail"} == {"MUST"}
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == str(len(conformance.CASES))
    assert suite.get("failures") == "2"
    skipped = suite.find("testcase[@name='restart.state-kept']/skipped")
    assert skipped is not None and "--restart-cmd" in (skipped.get("message") or "")
    failed = [
        case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == expected
    message = suite.find("testcase[@name='unprepare.unknown-claim']/failure")
    assert message is not None and "NOT_FOUND" in (message.get("message") or "")
