"""The pure parts of cluster mode: the labelled manifests a run creates (valid for every
release, by ``dralet validate``'s rules), the device selector that pins a device, what
a probe saw, the slice rules, the JUnit and JSON report, and the printed RBAC."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml
from click.testing import CliRunner

from dralet import releases
from dralet.cli.conformance import command
from dralet.conformance.cluster import objects, probe, rbac, registration
from dralet.conformance.cluster.cases import CASE_NAMES, CASES, with_prerequisites
from dralet.conformance.cluster.report import ClusterCaseResult, ClusterSuiteResult, Step
from dralet.validation import documents, engine, targets
from dralet.validation.diagnostics import Severity

RUN = "abc123"
DRIVER = "gpu.example.com"


def version_for(release: str) -> str:
    return "v1beta1" if release in ("1.32", "1.33") else "v1"


def manifests(release: str) -> list[dict[str, Any]]:
    version = version_for(release)
    return [
        objects.namespace("ns", run_id=RUN),
        objects.device_class("class", driver=DRIVER, version=version, run_id=RUN),
        objects.resource_claim_template(
            "tmpl",
            namespace="ns",
            version=version,
            device_class="class",
            run_id=RUN,
            selector='device.attributes["gpu.example.com"]["uuid"] == "GPU-1"',
        ),
        objects.resource_claim(
            "claim", namespace="ns", version=version, device_class="class", run_id=RUN
        ),
        objects.pod(
            "pod", namespace="ns", node="node-a", image="busybox:1.36", run_id=RUN, template="tmpl"
        ),
    ]


@pytest.mark.parametrize("release", releases.KUBERNETES_RELEASES)
def test_every_manifest_is_valid_for_the_release(release: str) -> None:
    sources = [
        documents.Source(m["metadata"]["name"], json.dumps(m))
        for m in manifests(release)
        if m["kind"] != "Pod"
    ]
    report = engine.validate_sources(sources, target=targets.Target(release))
    assert [d for d in report.diagnostics if d.severity is Severity.ERROR] == []
    assert report.objects == len(sources)


def test_every_object_and_every_claim_made_from_a_template_carries_the_run_label() -> None:
    for manifest in manifests("1.37"):
        assert manifest["metadata"]["labels"][objects.RUN_LABEL] == RUN
    template = manifests("1.37")[2]
    assert template["spec"]["metadata"]["labels"][objects.RUN_LABEL] == RUN


def test_the_pod_is_pinned_to_its_node_and_both_containers_use_the_claim() -> None:
    pod = objects.pod("p", namespace="ns", node="node-a", image="img", run_id=RUN, claim="c")
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]
    assert "nodeName" not in spec, "the scheduler must allocate the claim"
    assert spec["resourceClaims"] == [{"name": "device", "resourceClaimName": "c"}]
    for container in spec["initContainers"] + spec["containers"]:
        assert container["resources"]["claims"] == [{"name": "device"}]
    baseline = objects.pod("b", namespace="ns", node="node-a", image="img", run_id=RUN)
    assert baseline["spec"]["resourceClaims"] == []
    assert baseline["spec"]["containers"][0]["resources"] == {}


def test_a_device_is_pinned_by_an_attribute_no_other_device_shares() -> None:
    devices = {
        "gpu-0": {"model": {"string": "LATEST"}, "uuid": {"string": "GPU-0"}},
        "gpu-1": {"model": {"string": "LATEST"}, "uuid": {"string": "GPU-1"}},
    }
    assert (
        objects.unique_attribute_selector(devices, "gpu-1", driver=DRIVER)
        == 'device.attributes["gpu.example.com"]["uuid"] == "GPU-1"'
    )
    qualified = {
        "a": {"example.org/index": {"int": 0}, "version": {"version": "1.0.0"}},
        "b": {"example.org/index": {"int": 1}, "version": {"version": "2.0.0"}},
    }
    assert (
        objects.unique_attribute_selector(qualified, "b", driver=DRIVER)
        == 'device.attributes["example.org"]["index"] == 1'
    )
    alike = {"a": {"model": {"string": "x"}}, "b": {"model": {"string": "x"}}}
    assert objects.unique_attribute_selector(alike, "a", driver=DRIVER) == ""


def test_device_edits_are_what_the_claim_added_to_a_claimless_pod() -> None:
    baseline = probe.parse("--- /dev\nnull\nzero\n--- env\nHOSTNAME=base\nPATH=/bin\n")
    claimed = probe.parse(
        "--- /dev\nexample-gpu1\nnull\nzero\n"
        "--- env\nEXAMPLE_GPU_1=GPU-1\nHOSTNAME=pod\nPATH=/bin\n"
    )
    assert probe.device_edits(claimed, baseline) == {"/dev/example-gpu1", "env EXAMPLE_GPU_1=GPU-1"}
    assert probe.device_edits(baseline, baseline) == frozenset()


def slice_(name: str, pool: str, generation: int, count: int, devices: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [
                {"name": d, "basic": {"attributes": {"uuid": {"string": d.upper()}}}}
                for d in devices
            ],
        },
    }


def test_a_pool_is_complete_at_its_newest_generation_and_older_slices_are_stale() -> None:
    other_node = {**slice_("x", "p", 1, 1, ["gpu-9"]), "spec": {"nodeName": "node-b"}}
    items = [
        slice_("old", "p", 1, 1, ["gpu-0"]),
        slice_("new-a", "p", 2, 2, ["gpu-0"]),
        other_node,
    ]
    found = registration.node_slices(items, driver=DRIVER, node="node-a")
    assert found.incomplete() == ["pool 'p' generation 2: 1 slice(s), resourceSliceCount [2]"]
    assert found.stale() == ["old"]
    found = registration.node_slices(
        [*items, slice_("new-b", "p", 2, 2, ["gpu-1"])], driver=DRIVER, node="node-a"
    )
    assert found.incomplete() == []
    assert found.devices() == {
        "gpu-0": {"uuid": {"string": "GPU-0"}},
        "gpu-1": {"uuid": {"string": "GPU-1"}},
    }


def test_slices_are_validated_for_the_server_release() -> None:
    good = slice_("good", "p", 1, 1, ["gpu-0"])
    bad = slice_("bad", "p", 1, 1, ["GPU_0"])
    assert registration.validate([good], release="1.32") == []
    [error] = registration.validate([bad], release="1.32")
    assert error.startswith("bad: ") and "GPU_0" in error


def result(strict: bool = False) -> ClusterSuiteResult:
    return ClusterSuiteResult(
        (
            ClusterCaseResult("slices.published", "pass", "4 device(s)", 0.5, "node-a"),
            ClusterCaseResult(
                "claim.released", "fail", "not within 30s", 30.0, "node-a", (Step("release", 30.0),)
            ),
            ClusterCaseResult("pod.sees-devices", "fail", "nothing seen", 0.0, "node-a"),
            ClusterCaseResult(
                "driver.pod-deleted", "skip", "needs --driver-namespace", 0.0, "node-a"
            ),
            ClusterCaseResult("pod.running", "pass", "", 2.0, "node-a", (Step("start", 1.5),)),
        ),
        driver=DRIVER,
        server="https://127.0.0.1:6443 (Kubernetes 1.37)",
        run_id=RUN,
        nodes=("node-a",),
        strict=strict,
        leftovers=("Pod/conf-abc123-n0-pod-2",),
    )


def test_junit_has_one_testcase_per_case_and_counts_should_only_when_strict() -> None:
    suite = ElementTree.fromstring(result().to_junit_xml()).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "1", "1")
    cases = {t.get("name"): t for t in suite.iter("testcase")}
    released = cases["claim.released"]
    assert released.get("classname") == "dralet.conformance.cluster.MUST.node-a"
    failure = released.find("failure")
    assert failure is not None and failure.get("message") == "not within 30s"
    sees = cases["pod.sees-devices"]
    assert sees.find("failure") is None
    assert sees.findtext("system-out") == "SHOULD failed: nothing seen"
    assert cases["driver.pod-deleted"].find("skipped") is not None
    assert cases["pod.running"].findtext("system-out") == "start 1.50s"
    assert suite.findtext("system-err") == "left after cleanup: Pod/conf-abc123-n0-pod-2"
    strict = ElementTree.fromstring(result(strict=True).to_junit_xml()).find("testsuite")
    assert strict is not None and strict.get("failures") == "2"


def test_json_gives_each_case_its_level_node_and_steps() -> None:
    report = result().to_json()
    assert report["passed"] is False and report["runId"] == RUN
    released = next(c for c in report["cases"] if c["name"] == "claim.released")
    assert released == {
        "name": "claim.released",
        "level": "MUST",
        "node": "node-a",
        "status": "fail",
        "message": "not within 30s",
        "seconds": 30.0,
        "steps": [{"name": "release", "seconds": 30.0}],
    }
    assert result().failed("SHOULD") == ["pod.sees-devices"]


def test_every_case_has_a_level_and_a_rule() -> None:
    assert len(set(CASE_NAMES)) == len(CASES)
    assert all(c.level in ("MUST", "SHOULD") and c.rule for c in CASES)


def test_print_rbac_prints_the_three_cluster_roles() -> None:
    done = CliRunner().invoke(command, ["--print-rbac"])
    assert done.exit_code == 0, done.output
    printed = list(yaml.safe_load_all(done.output))
    assert [r["metadata"]["name"] for r in printed] == [
        rbac.CLUSTER_ROLE,
        rbac.WORKLOADS_ROLE,
        rbac.DRIVER_PODS_ROLE,
    ]
    verbs = {
        (group, resource, verb)
        for role in printed
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("", "pods", "create") in verbs and (
        "resource.k8s.io",
        "resourceslices",
        "list",
    ) in verbs
    assert not any(verb in ("*", "update", "patch") for _, _, verb in verbs)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--cluster", "--socket", "/tmp/x.sock", "--driver-name", DRIVER], "no --socket"),
        (["--cluster"], "--cluster needs --driver-name"),
        (["--cluster", "--driver-name", DRIVER, "--driver-namespace", "d"], "go together"),
        (["--socket", "/tmp/x.sock", "--nodes", "a"], "--nodes go with --cluster"),
        (["--socket", "/tmp/x.sock", "--case", "claim.released"], "--case go with --cluster"),
        (["--cluster", "--driver-name", DRIVER, "--case", "claim.gone"], "'claim.gone' is not"),
    ],
)
def test_local_and_cluster_flags_do_not_mix(args: list[str], complaint: str) -> None:
    done = CliRunner().invoke(command, args)
    assert done.exit_code == 2
    assert complaint in done.output


def test_the_docs_list_every_cluster_case_with_its_level_in_order() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    section = docs[docs.index("## Cluster mode") :]
    rows = re.findall(r"^\| `([a-z.-]+)` \| (MUST|SHOULD) \|", section, flags=re.MULTILINE)
    assert rows == [(c.name, c.level) for c in CASES]


@pytest.mark.parametrize(
    ("chosen", "runs"),
    [
        (["slices.valid"], {"slices.published", "slices.valid"}),
        (
            ["claim.reuse"],
            {"slices.published", "claim.allocated", "pod.running", "claim.released", "claim.reuse"},
        ),
        (["deadline"], {"deadline"}),
        (
            ["exclusive.distinct", "slices.pools-complete"],
            {
                "slices.published",
                "slices.pools-complete",
                "claim.allocated",
                "pod.running",
                "exclusive.distinct",
            },
        ),
    ],
)
def test_a_chosen_case_runs_with_the_cases_it_builds_on(chosen: list[str], runs: set[str]) -> None:
    assert with_prerequisites(chosen) == runs


def test_every_prerequisite_is_a_case_listed_before_the_one_that_needs_it() -> None:
    order = {name: i for i, name in enumerate(CASE_NAMES)}
    for c in CASES:
        assert all(order[first] < order[c.name] for first in c.after), c.name
