"""``dralet conformance --cluster`` on the real control plane with a real kubelet.

It passes against dralet installed by its chart, as an account holding only the RBAC it
prints, leaving nothing behind and touching nothing it did not make (a namespace that
existed stays, with what another run left in it); Ctrl-C mid-run still removes what it
made; and it fails, naming the right case, against two broken drivers built here as
images from the chart's own (tests/clusterconformance/broken_backends.py): one whose
release always fails, one that hands every claim's containers the same device.
Per-case timings are printed (``-s`` shows them).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from dralet.conformance import cluster as cluster_conformance
from dralet.conformance.cluster import objects
from tests.clusterconformance.identity import least_privilege_kubeconfig
from tests.clusterconformance.leftovers import left_behind
from tests.install import release
from tests.install.conftest import BuiltImage
from tests.install.node import InstallNode
from tests.install.operator import CHART, Operator, until, values
from tests.k8sapi import ClusterApi

pytestmark = [
    pytest.mark.install,
    pytest.mark.k8s,
    pytest.mark.e2e,
    pytest.mark.cluster_conformance,
    pytest.mark.timeout(1500),
]

HERE = Path(__file__).resolve().parent
RUN_LABEL = objects.RUN_LABEL
NAMESPACE = "dralet-conformance"
DRIVER_SELECTOR = "app.kubernetes.io/instance=dralet,app.kubernetes.io/component=kubelet-plugin"
RUN_TIMEOUT_S = 900
WAIT_S = "60"
"""--timeout of the passing runs: generous for a loaded CI machine."""
BROKEN_WAIT_S = "25"
"""--timeout of the broken drivers' runs: every release there waits it out."""


def command(
    api: ClusterApi, node: InstallNode, junit: Path, *extra: str, kubeconfig: Path | None = None
) -> list[str]:
    return [
        sys.executable, "-m", "dralet.cli.main", "conformance", "--cluster",
        "--kubeconfig", str(kubeconfig or api.cluster.admin_kubeconfig),
        "--driver-name", release.DRIVER, "--nodes", node.name,
        "--driver-namespace", release.NAMESPACE, "--driver-selector", DRIVER_SELECTOR,
        "-o", "json", "--junit", str(junit), *extra,
    ]  # fmt: skip


def conformance(
    api: ClusterApi, node: InstallNode, tmp_path: Path, *extra: str, kubeconfig: Path | None = None
) -> tuple[int, dict[str, Any], str, Path]:
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        command(api, node, junit, *extra, kubeconfig=kubeconfig),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr, junit


def print_timings(report: dict[str, Any], title: str) -> None:
    print(f"\n{title}: the report\n{json.dumps(report)}")
    print(f"{title}: per-case seconds (steps)")
    for case in report["cases"]:
        steps = ", ".join(f"{s['name']} {s['seconds']:.2f}" for s in case["steps"])
        print(f"  {case['name']:34} {case['status']:4} {case['seconds']:7.2f}  {steps}")


def test_passes_against_the_chart_installed_driver_and_leaves_nothing(
    k8s_api: ClusterApi, node: InstallNode, helm: str, kubectl: str, tmp_path: Path
) -> None:
    api = k8s_api
    operator = Operator(helm, kubectl, api, tmp_path / "helm")
    release.install_driver(operator, [node])
    # A namespace that exists already, with another run's template in it: both stay.
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    api.note_namespace(NAMESPACE)
    bystander = objects.resource_claim_template(
        "bystander", namespace=NAMESPACE, version="v1", device_class="absent", run_id="other"
    )
    api.create(bystander, namespace=NAMESPACE)

    # As an account holding only the printed RBAC, bound as the docs say.
    with least_privilege_kubeconfig(
        api, namespace=NAMESPACE, driver_namespace=release.NAMESPACE
    ) as kubeconfig:
        code, report, stderr, junit = conformance(
            api, node, tmp_path, "--timeout", WAIT_S, kubeconfig=kubeconfig
        )
    print_timings(report, "dralet installed by its chart")

    assert code == 0, (report, stderr)
    assert [(c["name"], c["status"]) for c in report["cases"]] == [
        (name, "pass") for name in cluster_conformance.CASE_NAMES
    ], report
    assert report["leftovers"] == []
    assert "dralet conformance: install-node-0: claim.released" in stderr
    assert "removing what this run created" in stderr
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "0" and suite.get("skipped") == "0"
    assert [t.get("name") for t in suite.iter("testcase")] == list(cluster_conformance.CASE_NAMES)
    assert {t.get("classname") for t in suite.iter("testcase")} >= {
        "dralet.conformance.cluster.MUST.install-node-0"
    }

    assert left_behind(api) == ["ResourceClaimTemplate/bystander"]
    assert api.get("Namespace", NAMESPACE) is not None
    assert not api.list("Pod", namespace=NAMESPACE)

    # Ctrl-C while pods run, in a namespace the run makes: all it made is removed.
    interrupted = f"{NAMESPACE}-interrupted"
    process = subprocess.Popen(
        command(api, node, tmp_path / "interrupted.xml", "--namespace", interrupted),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Interrupted once the run says its pod.running case started: its first claim's pod
    # exists then. (Watching for the pod through the API instead can miss a run that is
    # quicker than the polls.)
    assert process.stderr is not None
    said = []
    for line in process.stderr:
        said.append(line)
        if ": pod.running" in line:
            break
    assert api.list("Pod", namespace=interrupted, label_selector=RUN_LABEL), "".join(said)
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=300)
    err = "".join(said) + rest
    assert process.returncode == 130, err
    assert "interrupted" in err
    assert left_behind(api) == ["ResourceClaimTemplate/bystander"]
    assert api.get("Namespace", interrupted) is None

    operator.uninstall(release.RELEASE, release.NAMESPACE)
    until(lambda: not operator.resourceslices(release.DRIVER) or None, "slices gone", 120)


def broken_image(image: BuiltImage, variant: str, tmp_path: Path) -> tuple[str, Path]:
    """The chart's image plus tests/clusterconformance/broken_backends.py, built with
    podman; (name, archive)."""
    context = tmp_path / variant
    context.mkdir()
    (context / "broken_backends.py").write_text((HERE / "broken_backends.py").read_text())
    (context / "Containerfile").write_text(
        f"FROM localhost/{image.name}\n"
        "COPY broken_backends.py /opt/dralet-broken/\n"
        "ENV PYTHONPATH=/opt/dralet-broken\n"
    )
    name = f"dralet-broken:{variant}"
    subprocess.run(
        ["podman", "build", "--pull=never", "-t", name, "-f", str(context / "Containerfile"),
         str(context)],
        check=True, capture_output=True,
    )  # fmt: skip
    archive = tmp_path / f"{variant}.tar"
    subprocess.run(
        ["podman", "save", "--format", "oci-archive", "-o", str(archive), name],
        check=True,
        capture_output=True,
    )
    return name, archive


@pytest.mark.parametrize(
    ("variant", "failing"),
    [("never-releases", "claim.released"), ("one-device-for-all", "exclusive.distinct")],
)
def test_fails_naming_the_case_against_a_broken_driver(
    k8s_api: ClusterApi,
    node: InstallNode,
    helm: str,
    kubectl: str,
    image: BuiltImage,
    tmp_path: Path,
    variant: str,
    failing: str,
) -> None:
    api = k8s_api
    operator = Operator(helm, kubectl, api, tmp_path / "helm")
    name, archive = broken_image(image, variant, tmp_path)
    node.load_image(archive, name)
    tag = name.split(":")[1]
    backend = f"broken_backends:{variant.replace('-', '_')}"
    chosen = ["image.repository=dralet-broken", f"image.tag={tag}", f"backend.name={backend}"]
    release.install_driver(operator, [node], *values(*chosen))

    # Only the case the driver breaks and the registration cases checked below: every other
    # case would wait out the timeout on a driver that never releases (minutes).
    cases = [failing, "slices.pools-complete", "slices.valid"]
    code, report, stderr, _ = conformance(
        api, node, tmp_path, "--timeout", BROKEN_WAIT_S, *(f"--case={c}" for c in cases)
    )
    print_timings(report, f"broken driver {variant}")

    assert code == 1, (report, stderr)
    results = {c["name"]: c for c in report["cases"]}
    assert set(results) == cluster_conformance.with_prerequisites(cases), sorted(results)
    assert results[failing]["status"] == "fail", results[failing]
    for registered in ("slices.published", "slices.pools-complete", "slices.valid"):
        assert results[registered]["status"] == "pass", results[registered]
    if variant == "one-device-for-all":
        # Nothing else is wrong with this driver, and nothing else is reported.
        assert [c["name"] for c in report["cases"] if c["status"] != "pass"] == [failing]
        assert "same device edits" in results[failing]["message"]
        assert report["leftovers"] == []
    else:
        assert "gone (unprepared)" in results[failing]["message"]
        # Pods the kubelet cannot finish stay, and the run says so; the working driver
        # back, the kubelet unprepares and everything goes.
        assert report["leftovers"]
        operator.helm(
            "upgrade", release.RELEASE, str(CHART), "-n", release.NAMESPACE,
            *node.chart_values(),
        )  # fmt: skip
        operator.rollout_status(release.NAMESPACE, release.DAEMONSET, release.WAIT_S)
        until(lambda: not left_behind(api) or None, "the run's objects gone", release.WAIT_S)
    operator.uninstall(release.RELEASE, release.NAMESPACE)
    until(lambda: not operator.resourceslices(release.DRIVER) or None, "slices gone", 120)
