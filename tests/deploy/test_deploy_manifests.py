"""The chart renders for every supported Kubernetes version and every object passes the
strict schemas of that version; then the facts a node driver depends on.

The kubelet's host paths, the downward API, the gRPC liveness and readiness probes, the
update strategy per version, least-privilege RBAC, a DeviceClass selecting the driver,
the driver name set in one value, and values the chart must refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy.conftest import (
    CHART,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    RenderError,
    objects_schema_errors,
    only,
)

Document = dict[str, Any]
Render = Callable[..., tuple[Document, ...]]
SchemaErrors = Callable[[Mapping[str, Any], str], list[str]]

DRIVER = "gpu.example.com"
HEALTH_PORT = 51515
METRICS_PORT = 9400
HOST_PATHS = {
    "/var/lib/kubelet/plugins_registry",
    # The kubelet's plugins dir: the driver removes its own <driver>/ in it (docs/deploy.md).
    "/var/lib/kubelet/plugins",
    "/var/run/cdi",
}
EXAMPLES = (("driver.enabled", "false"), ("examples.enabled", "true"))
V1_FROM = "1.34"
"""resource.k8s.io/v1 is served from 1.34; 1.32 and 1.33 get v1beta1."""


def minor(version: str) -> int:
    return int(version.split(".")[1])


def resource_api_version(version: str) -> str:
    return "resource.k8s.io/v1" if minor(version) >= minor(V1_FROM) else "resource.k8s.io/v1beta1"


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


def rules_of(document: Document) -> dict[tuple[str, str], list[str]]:
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


DEVICE_STATUS = (("deviceStatus.write", "true"),)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "settings", [(), EXAMPLES, DEVICE_STATUS], ids=["driver", "examples", "device-status"]
)
def test_rendered_objects_pass_the_strict_schemas(
    render: Render,
    version: str,
    settings: tuple[tuple[str, str], ...],
) -> None:
    documents = render(version, settings)
    assert documents
    problems = objects_schema_errors(documents, version)
    assert problems == {name: [] for name in problems}
    for document in documents:
        if document["kind"] in {"DeviceClass", "ResourceClaimTemplate"}:
            assert document["apiVersion"] == resource_api_version(version)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_helm_lint_is_clean(helm: Callable[..., Any], version: str) -> None:
    for settings in ([], ["--set", "driver.enabled=false", "--set", "examples.enabled=true"]):
        completed = helm(
            "lint", "--strict", str(CHART), "--kube-version", f"{version}.0", *settings
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert "0 chart(s) failed" in completed.stdout


def test_kubernetes_version_comes_from_the_value_or_the_cluster(render: Render) -> None:
    from_value = only(render("1.37", (("kubernetesVersion", "1.33"),)), "DeviceClass")
    assert from_value["apiVersion"] == "resource.k8s.io/v1beta1"
    assert only(render("1.33"), "DeviceClass")["apiVersion"] == "resource.k8s.io/v1beta1"
    assert only(render("1.34"), "DeviceClass")["apiVersion"] == "resource.k8s.io/v1"
    patched = only(render("1.32", (("kubernetesVersion", "v1.35.2-gke.100"),)), "DeviceClass")
    assert patched["apiVersion"] == "resource.k8s.io/v1"


def test_the_1_34_objects_do_not_exist_on_1_32(
    render: Render, strict_schema_errors: SchemaErrors
) -> None:
    for settings in ((), EXAMPLES):
        for document in render("1.34", settings):
            if document["apiVersion"].startswith("resource.k8s.io/"):
                assert document["apiVersion"] == "resource.k8s.io/v1"
                with pytest.raises(LookupError, match=r"has no resource\.k8s\.io/v1 "):
                    strict_schema_errors(document, "1.32")


def test_the_1_32_claim_shape_is_refused_by_the_v1_schema(
    render: Render, strict_schema_errors: SchemaErrors
) -> None:
    template = only(render("1.32", EXAMPLES), "ResourceClaimTemplate")
    as_v1 = {**template, "apiVersion": "resource.k8s.io/v1"}
    assert strict_schema_errors(as_v1, "1.34")  # v1 nests the request under `exactly`


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((("kubernetesVersion", "1.31"),), "kubernetesVersion"),
        ((("kubernetesVersion", "1.39"),), "kubernetesVersion"),
        ((("kubernetesVersion", "latest"),), "kubernetesVersion"),
        ((("driverName", "Bad_Driver"),), "driverName"),
        ((("cdiDir", "var/run/cdi"),), "cdiDir"),
        ((("image.tag", "latest"),), "tag"),
        ((("logFormat", "yaml"),), "logFormat"),
        ((("backend.flags.Bad_Flag", "1"),), "Bad_Flag"),
        ((("unknownValue", "1"),), "unknownValue"),
    ],
)
def test_bad_values_are_refused_naming_the_value(
    render: Render, settings: tuple[tuple[str, str], ...], message: str
) -> None:
    with pytest.raises(RenderError, match=message):
        render("1.34", settings)


def test_clusters_outside_1_32_to_1_38_are_refused(render: Render) -> None:
    with pytest.raises(RenderError, match=r"requires kubeVersion: >=1\.32"):
        render("1.31")
    with pytest.raises(RenderError, match=r"Kubernetes 1\.39 .*supports 1\.32 to 1\.38"):
        render("1.39")


def test_seamless_upgrade_is_refused_on_1_32(render: Render) -> None:
    with pytest.raises(RenderError, match=r"seamlessUpgrade: needs Kubernetes 1\.33"):
        render("1.32", (("seamlessUpgrade", "true"),))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_daemonset_mounts_the_kubelet_dirs_at_the_same_paths(render: Render, version: str) -> None:
    documents = render(version)
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    host_volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert set(host_volumes.values()) == HOST_PATHS
    mounts = {m["name"]: m["mountPath"] for m in plugin_container(documents)["volumeMounts"]}
    for name, host_path in host_volumes.items():
        assert mounts[name] == host_path  # the kubelet dials the path the plugin reports
    args = flags(plugin_container(documents))
    assert args["--plugin-dir"] == f"/var/lib/kubelet/plugins/{DRIVER}"
    assert "--remove-plugin-dir-when-unused" in args
    assert args["--registry-dir"] == "/var/lib/kubelet/plugins_registry"
    assert args["--cdi-dir"] == "/var/run/cdi"
    assert args["--driver-name"] == DRIVER
    assert args["--driver"] == "example"


def test_kubelet_paths_follow_the_values(render: Render) -> None:
    documents = render(
        "1.34",
        (
            ("kubeletPaths.pluginsDir", "/data/kubelet/plugins"),
            ("kubeletPaths.registryDir", "/data/kubelet/plugins_registry"),
            ("cdiDir", "/etc/cdi"),
        ),
    )
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {
        "/data/kubelet/plugins_registry",
        "/data/kubelet/plugins",
        "/etc/cdi",
    }
    args = flags(plugin_container(documents))
    assert args["--plugin-dir"] == f"/data/kubelet/plugins/{DRIVER}"
    assert args["--registry-dir"] == "/data/kubelet/plugins_registry"
    assert args["--cdi-dir"] == "/etc/cdi"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_daemonset_identity_probes_and_ports(render: Render, version: str) -> None:
    from dralet.node.runner import READINESS_SERVICE

    container = plugin_container(render(version))
    args = flags(container)
    assert env_sources(container)["NODE_NAME"] == "spec.nodeName"
    assert args["--node-name"] == "$(NODE_NAME)"
    assert "--in-cluster" in args
    assert args["--health-port"] == str(HEALTH_PORT)
    assert args["--metrics-port"] == str(METRICS_PORT)
    assert args["--log-format"] == "json"
    assert container["livenessProbe"]["grpc"] == {"port": HEALTH_PORT}
    assert container["readinessProbe"]["grpc"] == {
        "port": HEALTH_PORT,
        "service": READINESS_SERVICE,
    }
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": HEALTH_PORT, "metrics": METRICS_PORT}
    image = container["image"]
    name, _, tag = image.rpartition(":")
    assert name
    assert tag
    assert tag != "latest"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_env_var_is_used_by_an_argument(render: Render, version: str) -> None:
    for seamless in ("true", "false") if minor(version) >= 33 else ("false",):
        container = plugin_container(render(version, (("seamlessUpgrade", seamless),)))
        for name in env_sources(container):
            assert any(f"$({name})" in arg for arg in container["args"]), name
            # dralet run reads NODE_NAME itself too; nothing else is read from the env.


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_update_strategy_and_per_instance_sockets(render: Render, version: str) -> None:
    documents = render(version)
    surge = minor(version) >= 33
    strategy = only(documents, "DaemonSet")["spec"]["updateStrategy"]
    container = plugin_container(documents)
    env = env_sources(container)
    assert strategy["type"] == "RollingUpdate"
    if surge:
        assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert env["POD_UID"] == "metadata.uid"
        assert flags(container)["--pod-uid"] == "$(POD_UID)"
    else:
        # A 1.32 kubelet holds one instance per driver: per-instance sockets would
        # make the old pod's exit deregister the new one.
        assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
        assert "POD_UID" not in env
        assert "--pod-uid" not in flags(container)
    off = render(version, (("seamlessUpgrade", "false"),))
    assert only(off, "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    assert "--pod-uid" not in flags(plugin_container(off))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_least_privilege_rbac(render: Render, version: str) -> None:
    from dralet.kube.events import EVENT_NAMESPACE

    documents = render(version)
    # Exactly the calls dralet run makes (see templates/rbac.yaml for each reason).
    assert rules_of(only(documents, "ClusterRole")) == {
        ("resource.k8s.io", "resourceslices"): sorted(
            ["list", "watch", "create", "patch", "delete"]
        ),
        ("resource.k8s.io", "resourceclaims"): ["get", "patch"],
        ("", "nodes"): ["get"],
    }
    role = only(documents, "Role")
    assert role["metadata"]["namespace"] == EVENT_NAMESPACE
    assert rules_of(role) == {("", "events"): ["create"]}
    daemonset = only(documents, "DaemonSet")
    account = only(documents, "ServiceAccount")
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": NAMESPACE,
    }
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = only(documents, binding_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": only(documents, role_kind)["metadata"]["name"],
        }
        assert binding["subjects"] == [subject]
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    assert daemonset["metadata"]["namespace"] == account["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_device_status_adds_exactly_its_status_rights(render: Render, version: str) -> None:
    documents = render(version, DEVICE_STATUS)
    assert "--write-device-status" in flags(plugin_container(documents))
    rules = only(documents, "ClusterRole")["rules"]
    added = [r for r in rules if r not in only(render(version), "ClusterRole")["rules"]]
    expected: list[dict[str, Any]] = [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/status"],
            "verbs": ["patch"],
        }
    ]
    if minor(version) >= 36:  # DRAResourceClaimGranularStatusAuthorization, beta on in 1.36
        expected.append(
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/driver"],
                "resourceNames": [DRIVER],
                "verbs": ["associated-node:patch"],
            }
        )
    assert added == expected
    policies = [
        d["metadata"]["name"] for d in documents if d["kind"] == "ValidatingAdmissionPolicy"
    ]
    assert any(name.endswith("-resourceclaim-status") for name in policies)
    assert "--write-device-status" not in flags(plugin_container(render(version)))


def test_device_metadata_adds_the_flag_and_nothing_else(render: Render) -> None:
    version = KUBERNETES_VERSIONS[-1]
    plain = render(version)
    documents = render(version, (("deviceMetadata.enabled", "true"),))
    added = [
        f for f in flags(plugin_container(documents)) if f not in flags(plugin_container(plain))
    ]
    assert added == ["--device-metadata"]
    assert only(documents, "ClusterRole") == only(plain, "ClusterRole")


def test_plugin_runs_as_root_without_capabilities(render: Render) -> None:
    context = plugin_container(render("1.34"))["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["privileged"] is False


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_device_class_and_example_claim(render: Render, version: str) -> None:
    device_class = only(render(version), "DeviceClass")
    assert device_class["apiVersion"] == resource_api_version(version)
    assert device_class["spec"]["selectors"] == [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    ]
    documents = render(version, EXAMPLES)
    assert {d["kind"] for d in documents} == {"ResourceClaimTemplate", "Pod"}
    template = only(documents, "ResourceClaimTemplate")
    assert template["apiVersion"] == resource_api_version(version)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exact = request.get("exactly", request)  # v1 nests the request under `exactly`
    assert exact["deviceClassName"] == device_class["metadata"]["name"]
    pod = only(documents, "Pod")
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    assert pod["metadata"]["namespace"] == template["metadata"]["namespace"]


def test_the_example_names_what_the_example_driver_injects() -> None:
    from dralet.drivers.example import gpus

    comment = (CHART / "templates" / "examples.yaml").read_text()
    source = Path(gpus.__file__).read_text()
    assert 'f"EXAMPLE_GPU_{index}={self.gpu_uuid(index)}"' in source
    assert 'path=f"/dev/example-gpu{index}"' in source
    assert "EXAMPLE_GPU_<index>=" in comment
    assert "/dev/example-gpu<index>" in comment


def test_the_driver_name_is_set_in_one_value(render: Render) -> None:
    other = "accel.vendor.example.org"
    settings = (("driverName", other),)
    rendered = yaml.safe_dump_all(render("1.34", settings) + render("1.34", settings + EXAMPLES))
    assert DRIVER not in rendered
    documents = render("1.34", settings)
    assert flags(plugin_container(documents))["--driver-name"] == other
    assert only(documents, "DeviceClass")["metadata"]["name"] == other
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["driverName"] == DRIVER
    for template in (CHART / "templates").iterdir():
        assert DRIVER not in template.read_text(), template.name


def test_scheduling_values_reach_the_pod(render: Render) -> None:
    documents = render(
        "1.34",
        (
            ("nodeSelector.accelerator", "example"),
            ("tolerations[0].key", "dedicated"),
            ("tolerations[0].operator", "Exists"),
            ("resources.limits.memory", "512Mi"),
            ("image.repository", "registry.example.org/dralet"),
            ("image.tag", "0.2.0"),
            ("backend.flags.gpus", "8"),
        ),
    )
    pod = only(documents, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"accelerator": "example"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    container = plugin_container(documents)
    assert container["resources"]["limits"] == {"memory": "512Mi"}
    assert container["image"] == "registry.example.org/dralet:0.2.0"
    assert flags(container)["--gpus"] == "8"


def test_manifest_flags_are_options_of_dralet_run(render: Render) -> None:
    from dralet.cli import run

    options = {opt for param in run.command.params for opt in param.opts}
    for version in KUBERNETES_VERSIONS:
        assert set(flags(plugin_container(render(version)))) <= options
