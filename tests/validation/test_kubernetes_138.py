"""What ``dralet validate`` checks differently at Kubernetes 1.38 than at 1.37: each rule
new in 1.38 (k8s.io/kubernetes v1.38.0-beta.0 pkg/apis/resource/validation) is refused at
1.38 and, where 1.37.2 accepted it, still accepted at 1.37."""

from __future__ import annotations

import pytest

from dralet.validation import engine
from dralet.validation.documents import Source
from dralet.validation.targets import DEFAULT_KUBERNETES_VERSION, Target

SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: s}}
spec:
  driver: gpu.example.com
  pool: {{name: p, resourceSliceCount: 1}}
{node}  devices:
  - name: gpu-0
{device}"""

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: c}}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
{request}{constraints}"""


def _found(text: str, version: str) -> list[tuple[str, str, str]]:
    report = engine.validate_sources([Source("m.yaml", text)], target=Target(version))
    return [(d.rule, d.field, d.message) for d in report.diagnostics]


def _rules(text: str, version: str) -> list[tuple[str, str]]:
    return [(rule, field) for rule, field, _ in _found(text, version)]


def test_1_38_is_the_default_target() -> None:
    assert DEFAULT_KUBERNETES_VERSION == "1.38"


def test_an_attribute_name_with_two_slashes_is_refused_from_1_38() -> None:
    text = SLICE.format(
        node="  nodeName: n\n", device="    attributes:\n      gpu.example.com/a/b: {int: 1}\n"
    )
    assert _rules(text, "1.37") == []
    [(rule, field, message)] = _found(text, "1.38")
    assert (rule, field) == ("DRA012", "spec.devices[0].attributes[gpu.example.com/a/b]")
    assert "more than one slash" in message


def test_a_capacity_name_with_two_slashes_is_refused_from_1_38() -> None:
    text = SLICE.format(
        node="  nodeName: n\n", device="    capacity:\n      a/b/memory: {value: 1Gi}\n"
    )
    assert _rules(text, "1.37") == []
    assert _rules(text, "1.38") == [("DRA012", "spec.devices[0].capacity[a/b/memory]")]


def test_a_constraint_attribute_with_two_slashes_is_refused_from_1_38() -> None:
    text = CLAIM.format(
        request="",
        constraints="    constraints:\n    - matchAttribute: gpu.example.com/numa/node\n",
    )
    assert _rules(text, "1.37") == []
    assert _rules(text, "1.38") == [("DRA012", "spec.devices.constraints[0].matchAttribute")]


@pytest.mark.parametrize("name", ["memory", "gpu.example.com/memory"])
def test_capacity_requests_may_name_the_capacity_short_or_qualified(name: str) -> None:
    text = CLAIM.format(
        request=f"        capacity:\n          requests: {{{name}: 1Gi}}\n", constraints=""
    )
    assert _rules(text, "1.38") == []


@pytest.mark.parametrize("name", ["a/b/memory", "Memory Size", "example.com/"])
def test_a_malformed_capacity_request_name_is_refused_from_1_38(name: str) -> None:
    text = CLAIM.format(
        request=f"        capacity:\n          requests: {{'{name}': 1Gi}}\n", constraints=""
    )
    assert _rules(text, "1.37") == []
    assert _rules(text, "1.38") == [
        ("DRA012", f"spec.devices.requests[0].exactly.capacity.requests[{name}]")
    ]


TWO_TERMS = """\
    nodeSelector:
      nodeSelectorTerms:
      - matchExpressions: [{key: zone, operator: In, values: [a]}]
      - matchExpressions: [{key: zone, operator: In, values: [b]}]
"""


def test_a_per_device_node_selector_has_one_term_from_1_38() -> None:
    text = SLICE.format(node="  perDeviceNodeSelection: true\n", device=TWO_TERMS)
    assert _rules(text, "1.37") == []
    [(rule, field, message)] = _found(text, "1.38")
    assert (rule, field) == ("DRA015", "spec.devices[0].nodeSelector")
    assert "exactly one node selector term" in message


def test_a_per_device_node_selector_without_terms_is_refused_before_1_38_too() -> None:
    text = SLICE.format(
        node="  perDeviceNodeSelection: true\n",
        device="    nodeSelector: {nodeSelectorTerms: []}\n",
    )
    for version in ("1.37", "1.38"):
        assert ("DRA015", "spec.devices[0].nodeSelector") in _rules(text, version)


@pytest.mark.parametrize(
    ("version", "refused_from_1_38"),
    [
        ("1.2.3", False),
        ("123456789012345678.0.0", False),
        ("1234567890123456789.0.0", True),
        ("1.0.0-1234567890123456789", True),
        ("1.0.0-a1234567890123456789", False),
        ("1.0.0+1234567890123456789", False),
    ],
)
def test_version_numbers_fit_in_int64_from_1_38(version: str, refused_from_1_38: bool) -> None:
    text = SLICE.format(
        node="  nodeName: n\n",
        device=f"    attributes:\n      driverVersion: {{version: '{version}'}}\n",
    )
    assert _rules(text, "1.37") == []
    expected = [("DRA014", "spec.devices[0].attributes[driverVersion].version")]
    assert _rules(text, "1.38") == (expected if refused_from_1_38 else [])


def test_a_version_in_a_list_attribute_is_held_to_18_digits_too() -> None:
    text = SLICE.format(
        node="  nodeName: n\n",
        device="    attributes:\n      versions: {versions: ['1.0.0', '1234567890123456789.0']}\n",
    )
    report = engine.validate_sources(
        [Source("m.yaml", text)], target=Target("1.38", list_type_attributes=True)
    )
    assert [(d.rule, d.field) for d in report.diagnostics] == [
        ("DRA014", "spec.devices[0].attributes[versions].versions[1]")
    ]


def test_a_v1beta1_object_is_an_error_at_1_38_that_names_the_versions_to_use() -> None:
    text = "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: gpu}\n"
    assert [rule for rule, _, _ in _found(text, "1.37")] == ["DRA109"]
    [(rule, field, message)] = _found(text, "1.38")
    assert (rule, field) == ("DRA003", "apiVersion")
    assert "removed in Kubernetes 1.38" in message
    assert "use resource.k8s.io/v1beta2, resource.k8s.io/v1" in message
