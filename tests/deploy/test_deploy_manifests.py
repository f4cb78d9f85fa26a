"""deploy/ renders with ``kubectl kustomize`` and every object passes the strict schemas.

Each kustomize target is checked against the Kubernetes versions it is for: the base
(version-neutral objects) against 1.32 and 1.34, each overlay and example against its
own. Then the facts a node driver depends on: the kubelet's host paths, the downward
API, the gRPC liveness probe on the health port, the update strategy per version,
least-privilege RBAC, and a DeviceClass selecting the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

Document = dict[str, Any]
Render = Callable[[str], tuple[Document, ...]]
SchemaErrors = Callable[[Mapping[str, Any], str], list[str]]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DRIVER = "gpu.example.com"
HEALTH_PORT = 51515
METRICS_PORT = 9400
HOST_PATHS = {
    "/var/lib/kubelet/plugins_registry",
    f"/var/lib/kubelet/plugins/{DRIVER}",
    "/var/run/cdi",
}
# kustomize target -> the Kubernetes versions it is written for
TARGETS = {
    "base": ("1.32", "1.34"),
    "overlays/k8s-1.32": ("1.32", "1.33"),
    "overlays/k8s-1.34": ("1.34", "1.35"),
    "overlays/k8s-1.34-seamless-upgrade": ("1.34", "1.35"),
    "examples/k8s-1.32": ("1.32", "1.33"),
    "examples/k8s-1.34": ("1.34", "1.35"),
}
OVERLAYS = [t for t in TARGETS if t.startswith("overlays/")]
CASES = [(target, version) for target, versions in TARGETS.items() for version in versions]


def only(documents: tuple[Document, ...], kind: str) -> Document:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def plugin_container(documents: tuple[Document, ...]) -> Document:
    (container,) = only(documents, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def flags(container: Document) -> dict[str, str]:
    found = {}
    for arg in container["args"]:
        name, _, value = arg.partition("=")
        found[name] = value
    return found


def env_sources(container: Document) -> dict[str, str]:
    return {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}


def test_every_target_and_manifest_is_covered() -> None:
    kustomizations = {
        p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("kustomization.yaml")
    }
    assert kustomizations - {"components/seamless-upgrade"} == set(TARGETS)
    referenced: set[Path] = set()
    for path in DEPLOY.rglob("kustomization.yaml"):
        listing = yaml.safe_load(path.read_text())
        referenced |= {
            (path.parent / r).resolve() for r in listing.get("resources", []) if r.endswith(".yaml")
        }
    manifests = {p.resolve() for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert manifests == referenced, "a manifest under deploy/ that no kustomization uses"


@pytest.mark.parametrize(("target", "version"), CASES, ids=[f"{t}@{v}" for t, v in CASES])
def test_rendered_objects_pass_the_strict_schemas(
    render: Render, strict_schema_errors: SchemaErrors, target: str, version: str
) -> None:
    documents = render(target)
    assert documents
    problems = {
        f"{d['kind']}/{d['metadata']['name']}": strict_schema_errors(d, version) for d in documents
    }
    assert problems == {name: [] for name in problems}


def test_the_1_34_objects_do_not_exist_on_1_32(
    render: Render, strict_schema_errors: SchemaErrors
) -> None:
    for target in ("overlays/k8s-1.34", "examples/k8s-1.34"):
        (claims_object,) = [
            d for d in render(target) if d["apiVersion"].startswith("resource.k8s.io/")
        ]
        assert claims_object["apiVersion"] == "resource.k8s.io/v1"
        with pytest.raises(LookupError, match=r"has no resource\.k8s\.io/v1 "):
            strict_schema_errors(claims_object, "1.32")


def test_the_1_32_claim_shape_is_refused_by_the_v1_schema(
    render: Render, strict_schema_errors: SchemaErrors
) -> None:
    template = only(render("examples/k8s-1.32"), "ResourceClaimTemplate")
    as_v1 = {**template, "apiVersion": "resource.k8s.io/v1"}
    assert strict_schema_errors(as_v1, "1.34")  # v1 nests the request under `exactly`


@pytest.mark.parametrize("target", OVERLAYS)
def test_daemonset_mounts_the_kubelet_dirs_at_the_same_paths(render: Render, target: str) -> None:
    documents = render(target)
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert set(host_volumes.values()) == HOST_PATHS
    mounts = {m["name"]: m["mountPath"] for m in plugin_container(documents)["volumeMounts"]}
    for name, host_path in host_volumes.items():
        assert mounts[name] == host_path  # the kubelet dials the path the plugin reports
    args = flags(plugin_container(documents))
    assert args["--plugin-dir"] == f"/var/lib/kubelet/plugins/{DRIVER}"
    assert args["--registry-dir"] == "/var/lib/kubelet/plugins_registry"
    assert args["--cdi-dir"] == "/var/run/cdi"
    assert args["--driver-name"] == DRIVER


@pytest.mark.parametrize("target", OVERLAYS)
def test_daemonset_identity_probe_and_ports(render: Render, target: str) -> None:
    container = plugin_container(render(target))
    args = flags(container)
    assert env_sources(container)["NODE_NAME"] == "spec.nodeName"
    assert args["--node-name"] == "$(NODE_NAME)"
    assert "--in-cluster" in args
    assert args["--health-port"] == str(HEALTH_PORT)
    assert args["--metrics-port"] == str(METRICS_PORT)
    assert args["--log-format"] == "json"
    assert container["livenessProbe"]["grpc"] == {"port": HEALTH_PORT}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": HEALTH_PORT, "metrics": METRICS_PORT}
    image = container["image"]
    name, _, tag = image.rpartition(":")
    assert name
    assert tag
    assert tag != "latest"


@pytest.mark.parametrize(
    ("target", "surge"),
    [
        ("overlays/k8s-1.32", False),
        ("overlays/k8s-1.34", False),
        ("overlays/k8s-1.34-seamless-upgrade", True),
    ],
)
def test_update_strategy_and_per_instance_sockets(render: Render, target: str, surge: bool) -> None:
    documents = render(target)
    strategy = only(documents, "DaemonSet")["spec"]["updateStrategy"]
    container = plugin_container(documents)
    env = env_sources(container)
    assert strategy["type"] == "RollingUpdate"
    if surge:
        assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert env["POD_UID"] == "metadata.uid"
        assert flags(container)["--pod-uid"] == "$(POD_UID)"
    else:
        assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
        # `dralet run` reads $POD_UID for --pod-uid: its mere presence would switch to
        # per-instance sockets, which a 1.32 kubelet cannot handle.
        assert "POD_UID" not in env
        assert "--pod-uid" not in flags(container)


@pytest.mark.parametrize("target", OVERLAYS)
def test_least_privilege_rbac(render: Render, target: str) -> None:
    documents = render(target)
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in only(documents, "ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        ("resource.k8s.io", "resourceslices"): sorted(
            ["list", "watch", "create", "patch", "delete"]
        ),
        ("resource.k8s.io", "resourceclaims"): ["get", "patch"],
        ("", "nodes"): ["get"],
        ("", "events"): ["create"],
    }
    daemonset = only(documents, "DaemonSet")
    binding = only(documents, "ClusterRoleBinding")
    account = only(documents, "ServiceAccount")
    assert binding["roleRef"]["name"] == only(documents, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    assert daemonset["metadata"]["namespace"] == account["metadata"]["namespace"]


@pytest.mark.parametrize("target", OVERLAYS)
def test_plugin_runs_as_root_without_capabilities(render: Render, target: str) -> None:
    context = plugin_container(render(target))["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["privileged"] is False


@pytest.mark.parametrize(
    ("overlay", "examples", "api_version"),
    [
        ("overlays/k8s-1.32", "examples/k8s-1.32", "resource.k8s.io/v1beta1"),
        ("overlays/k8s-1.34", "examples/k8s-1.34", "resource.k8s.io/v1"),
    ],
)
def test_device_class_and_example_claim(
    render: Render, overlay: str, examples: str, api_version: str
) -> None:
    device_class = only(render(overlay), "DeviceClass")
    assert device_class["apiVersion"] == api_version
    assert device_class["spec"]["selectors"] == [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    ]
    documents = render(examples)
    template = only(documents, "ResourceClaimTemplate")
    assert template["apiVersion"] == api_version
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exact = request.get("exactly", request)  # v1 nests the request under `exactly`
    assert exact["deviceClassName"] == device_class["metadata"]["name"]
    pod = only(documents, "Pod")
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    assert pod["metadata"]["namespace"] == template["metadata"]["namespace"]


def test_manifest_flags_are_options_of_dralet_run(render: Render) -> None:
    from dralet.cli import run

    options = {opt for param in run.command.params for opt in param.opts}
    for target in OVERLAYS:
        assert set(flags(plugin_container(render(target)))) <= options
