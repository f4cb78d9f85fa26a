"""A validation run over in-memory sources: per-object and cross-object rules."""

from __future__ import annotations

import pytest

from dralet.validation import catalog, engine
from dralet.validation.diagnostics import Path, Severity, field_path
from dralet.validation.documents import Source
from dralet.validation.targets import Target

SLICE = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: s}
spec:
  driver: gpu.example.com
  pool: {name: p, generation: 0, resourceSliceCount: 1}
  nodeName: n
  devices:
  - {name: gpu-0, basic: {attributes: {model: {string: H100}}}}
"""

CLAIM = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: gpu
      deviceClassName: gpu.example.com
      selectors:
      - cel: {expression: 'device.attributes["gpu.example.com"].model == "H200"'}
"""


def _run(*texts: str) -> engine.Report:
    sources = [Source(f"f{i}.yaml", text) for i, text in enumerate(texts)]
    return engine.validate_sources(sources, target=Target("1.32"))


def test_selectors_are_matched_against_slices_from_other_files() -> None:
    report = _run(CLAIM, SLICE)
    assert [(d.file, d.line, d.rule) for d in report.diagnostics] == [("f0.yaml", 9, "DRA105")]
    assert (report.files, report.objects) == (2, 2)


def test_without_slices_selectors_are_only_compiled() -> None:
    assert _run(CLAIM).diagnostics == ()


def test_diagnostics_carry_the_rule_severity_and_fix() -> None:
    (diagnostic,) = _run(CLAIM, SLICE).diagnostics
    rule = catalog.rule("DRA105")
    assert (diagnostic.severity, diagnostic.fix) == (Severity.WARNING, rule.fix)


def test_every_rule_has_why_fix_and_examples() -> None:
    for rule in catalog.RULES.values():
        assert rule.id.startswith("DRA")
        assert rule.why and rule.fix and rule.bad and rule.good and rule.title
        assert "\n" not in rule.why and "\n" not in rule.fix


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("spec", "devices", "requests", 0, "name"), "spec.devices.requests[0].name"),
        (
            ("spec", "devices", 1, "attributes", "numa", "int"),
            "spec.devices[1].attributes[numa].int",
        ),
        (
            ("spec", "devices", 0, "capacity", "memory", "value"),
            "spec.devices[0].capacity[memory].value",
        ),
        (
            ("spec", "devices", 0, "basic", "capacity", "memory"),
            "spec.devices[0].basic.capacity[memory]",
        ),
        (
            ("spec", "devices", "requests", 0, "exactly", "capacity", "requests", "memory"),
            "spec.devices.requests[0].exactly.capacity.requests[memory]",
        ),
        (("metadata", "labels", "example.com/Bad Key"), "metadata.labels[example.com/Bad Key]"),
        (
            ("spec", "sharedCounters", 0, "counters", "memory"),
            "spec.sharedCounters[0].counters[memory]",
        ),
    ],
)
def test_a_finding_names_its_field_as_the_api_server_does(path: Path, field: str) -> None:
    assert field_path(path) == field


@pytest.mark.parametrize("value", ["null", "H100", "[H100]", "{string: H100, int: 1}"])
def test_an_attribute_that_is_not_one_value_is_refused_beside_any_selector(value: str) -> None:
    """A slice attribute that is null, a string, a list or two values at once gets its
    own diagnostic, and the selectors are matched without it (no crash, no silence)."""
    slice_text = SLICE.replace("{model: {string: H100}}", f"{{model: {value}}}")
    report = _run(slice_text, CLAIM)
    on_slice = [(d.line, d.rule) for d in report.diagnostics if d.file == "f0.yaml"]
    assert on_slice == [(9, "DRA004" if value in {"H100", "[H100]"} else "DRA014")]


ADMIN_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: debug, namespace: ops}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.example.com, allocationMode: All, adminAccess: true}
"""
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ops\n  labels: LABELS\n"


@pytest.mark.parametrize(
    ("namespace", "rule"),
    [
        (None, "DRA110"),
        (NAMESPACE.replace("LABELS", "{team: ops}"), "DRA026"),
        (NAMESPACE.replace("LABELS", "{resource.kubernetes.io/admin-access: 'false'}"), "DRA026"),
        (NAMESPACE.replace("LABELS", "{resource.kubernetes.io/admin-access: 'true'}"), None),
    ],
)
def test_admin_access_is_judged_by_the_namespace_from_any_file(
    namespace: str | None, rule: str | None
) -> None:
    texts = [ADMIN_CLAIM] if namespace is None else [ADMIN_CLAIM, namespace]
    report = engine.validate_sources(
        [Source(f"f{i}.yaml", t) for i, t in enumerate(texts)], target=Target("1.37")
    )
    found = [(d.file, d.rule, d.field) for d in report.diagnostics]
    where = "spec.devices.requests[0].adminAccess"  # as admission names it, for a template too
    assert found == ([] if rule is None else [("f0.yaml", rule, where)])


def test_without_admin_access_the_namespace_label_does_not_matter() -> None:
    text = ADMIN_CLAIM.replace(", adminAccess: true", "")
    report = engine.validate_sources([Source("f.yaml", text)], target=Target("1.37"))
    assert report.diagnostics == ()


@pytest.mark.parametrize(
    ("api_version", "kind", "message"),
    [
        (
            "scheduling.k8s.io/v1alpha2",
            "Workload",
            "apiVersion 'scheduling.k8s.io/v1alpha2' does not serve Workload on Kubernetes "
            "1.37; it is served as scheduling.k8s.io/v1alpha3, scheduling.k8s.io/v1beta1",
        ),
        (
            "v1",
            "ConfigMapp",
            "Kubernetes 1.37 serves no kind ConfigMapp in the core group (did you mean ConfigMap?)",
        ),
    ],
)
def test_a_version_or_kind_a_built_in_group_lacks_is_an_error(
    api_version: str, kind: str, message: str
) -> None:
    text = f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x, namespace: default}}\n"
    report = engine.validate_sources([Source("f.yaml", text)], target=Target("1.37"))
    assert [(d.rule, d.severity, d.message) for d in report.diagnostics] == [
        ("DRA003", Severity.ERROR, message)
    ]


def test_a_custom_resource_is_only_a_warning() -> None:
    text = "apiVersion: gpu.example.com/v1\nkind: GpuConfig\nmetadata: {name: x}\n"
    report = engine.validate_sources([Source("f.yaml", text)], target=Target("1.37"))
    assert [(d.rule, d.severity) for d in report.diagnostics] == [("DRA006", Severity.WARNING)]
