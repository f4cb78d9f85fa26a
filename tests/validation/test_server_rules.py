"""Rules validate holds as kube-apiserver 1.37 and 1.38 do, found by the generated
differential (tests/k8s/test_validate_differential.py): each case is one object, the rule
and the field the server names. Each cites its upstream source in the module that holds it.
"""

from __future__ import annotations

import pytest

from dralet.validation import engine
from dralet.validation.documents import Source
from dralet.validation.targets import Target

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: c, namespace: default}}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.example.com
{extra}"""
SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: s}}
spec:
  driver: gpu.example.com
  pool: {{name: p, resourceSliceCount: 1}}
  nodeName: n
  devices:
  - name: d
{extra}"""
TAINT_RULE = """\
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {{name: {name}}}
spec:
  deviceSelector: {{driver: gpu.example.com, device: {device}}}
  taint: {{key: example.com/k, effect: {effect}{extra}}}
"""
POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: default}}
spec:
{pod}  resourceClaims:
  - {{name: gpu, resourceClaimName: {claim}}}
  containers:
  - name: c
    image: x
    resources:
      claims: {uses}
"""


def _errors(text: str, release: str = "1.37") -> list[tuple[str, str]]:
    report = engine.validate_sources([Source("f.yaml", text)], target=Target(release))
    return [(d.rule, d.field) for d in report.diagnostics if d.severity.value == "error"]


REQUEST = "spec.devices.requests[0].exactly"
REFUSED = [
    pytest.param(
        CLAIM.format(extra="        tolerations: [{key: k, operator: Exists, value: v}]\n"),
        ("DRA024", f"{REQUEST}.tolerations[0].value"),
        id="toleration-exists-with-value",
    ),
    pytest.param(
        CLAIM.format(extra="        tolerations: [{key: k, operator: Lt}]\n"),
        ("DRA024", f"{REQUEST}.tolerations[0].operator"),
        id="toleration-operator",
    ),
    pytest.param(
        CLAIM.format(extra="        tolerations: [{key: 'a b', effect: Evict}]\n"),
        ("DRA024", f"{REQUEST}.tolerations[0].key"),
        id="toleration-key",
    ),
    pytest.param(
        CLAIM.format(extra="        tolerations: [{key: k, value: '" + "v" * 64 + "'}]\n"),
        ("DRA024", f"{REQUEST}.tolerations[0].value"),
        id="toleration-value-length",
    ),
    pytest.param(
        CLAIM.format(extra="        count: 9223372036854775808\n"),
        ("DRA004", f"{REQUEST}.count"),
        id="int64-overflow",
    ),
    pytest.param(
        CLAIM.format(extra="        capacity: {requests: {memory: lots}}\n"),
        ("DRA004", f"{REQUEST}.capacity.requests[memory]"),
        id="capacity-request-quantity",
    ),
    pytest.param(
        CLAIM.format(
            extra="        selectors: [{cel: {expression: 'device.driver.matches(\"[\")'}}]\n"
        ),
        ("DRA020", f"{REQUEST}.selectors[0].cel.expression"),
        id="cel-invalid-regex-literal",
    ),
    pytest.param(
        CLAIM.format(extra="        selectors: [null]\n"),
        ("DRA018", f"{REQUEST}.selectors[0].cel"),
        id="null-selector-is-an-empty-one",
    ),
    pytest.param(
        CLAIM.format(extra="").replace(
            "    requests:\n", "    constraints: [null]\n    requests:\n"
        ),
        ("DRA018", "spec.devices.constraints[0]"),
        id="null-constraint",
    ),
    pytest.param(
        CLAIM.format(extra="").replace("namespace: default", "namespace: default, finalizers: [a]"),
        ("DRA012", "metadata.finalizers[0]"),
        id="finalizer-without-domain",
    ),
    pytest.param(
        SLICE.format(extra="    bindingConditions: [example.com/ready]\n"),
        ("DRA018", "spec.devices[0].bindingFailureConditions"),
        id="binding-conditions-need-failure-conditions",
    ),
    pytest.param(
        SLICE.format(
            extra="    bindingConditions: [a, b, c, d, e]\n    bindingFailureConditions: [f]\n"
        ),
        ("DRA013", "spec.devices[0].bindingConditions"),
        id="binding-conditions-at-most-4",
    ),
    pytest.param(
        SLICE.format(extra="    bindingConditions: [a]\n    bindingFailureConditions: [a]\n"),
        ("DRA018", "spec.devices[0].bindingFailureConditions[0]"),
        id="binding-conditions-overlap",
    ),
    pytest.param(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\n"
        "spec: {extendedResourceName: requests.example.com/gpu}\n",
        ("DRA012", "spec.extendedResourceName"),
        id="extended-resource-name-quota-prefix",
    ),
    pytest.param(
        TAINT_RULE.format(name="r", device="d", effect="Evict", extra=""),
        ("DRA024", "spec.taint.effect"),
        id="taint-rule-effect",
    ),
    pytest.param(
        TAINT_RULE.format(name="r", device="d.e", effect="NoSchedule", extra=""),
        ("DRA012", "spec.deviceSelector.device"),
        id="taint-rule-device-name",
    ),
    pytest.param(
        TAINT_RULE.format(name="R_1", device="d", effect="NoSchedule", extra=""),
        ("DRA012", "metadata.name"),
        id="taint-rule-name",
    ),
    pytest.param(
        TAINT_RULE.format(name="r", device="d", effect="NoSchedule", extra=", timeAdded: a"),
        ("DRA004", "spec.taint.timeAdded"),
        id="taint-rule-time-added",
    ),
    pytest.param(
        POD.format(pod="", claim="Upper", uses="[{name: gpu}]"),
        ("DRA012", "spec.resourceClaims[0].resourceClaimName"),
        id="pod-claim-name-syntax",
    ),
    pytest.param(
        POD.format(pod="", claim="c", uses="[{name: gpu}, {name: gpu}]"),
        ("DRA016", "spec.containers[0].resources.claims[1]"),
        id="pod-duplicate-claim-use",
    ),
    pytest.param(
        POD.format(pod="", claim="c", uses="[{name: gpu, request: a.b}]"),
        ("DRA012", "spec.containers[0].resources.claims[0].request"),
        id="pod-claim-request-with-dots",
    ),
    pytest.param(
        POD.format(pod="  resources: {claims: [{name: gpu}]}\n", claim="c", uses="[{name: gpu}]"),
        ("DRA018", "spec.resources.claims"),
        id="pod-level-claims",
    ),
]


REFUSED += [
    pytest.param(
        """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      tolerations: [{operator: Exists}]
      firstAvailable: [{name: a, deviceClassName: gpu.example.com}]
""",
        ("DRA018", "spec.devices.requests[0].tolerations"),
        id="v1beta1-tolerations-beside-first-available",
    ),
    pytest.param(
        SLICE.format(extra="    bindingConditions: [[a]]\n    bindingFailureConditions: [b]\n"),
        ("DRA004", "spec.devices[0].bindingConditions[0]"),
        id="binding-condition-not-a-string",
    ),
    pytest.param(
        TAINT_RULE.format(name="r", device="d", effect="NoSchedule", extra="").split("spec:")[0],
        ("DRA024", "spec.taint.key"),
        id="taint-rule-without-spec",
    ),
]


@pytest.mark.parametrize(("text", "expected"), REFUSED)
def test_refused_as_the_server_refuses_it(text: str, expected: tuple[str, str]) -> None:
    assert expected in _errors(text)


_NEGATIVE_REQUEST = CLAIM.format(extra="        capacity: {requests: {memory: '-1'}}\n")
_MANY_COUNTERS = SLICE.format(
    extra="    consumesCounters:\n    - counterSet: s\n      counters: {"
    + ", ".join(f"c{n}: {{value: '1'}}" for n in range(33))
    + "}\n"
)


@pytest.mark.parametrize(
    ("text", "release", "expected"),
    [
        (_NEGATIVE_REQUEST, "1.38", [("DRA014", f"{REQUEST}.capacity.requests[memory]")]),
        (_NEGATIVE_REQUEST, "1.37", []),
        (_MANY_COUNTERS, "1.37", [("DRA013", "spec.devices[0].consumesCounters[0].counters")]),
    ],
    ids=["negative-capacity-request-k138", "negative-capacity-request-k137", "33-counters"],
)
def test_rules_by_release(text: str, release: str, expected: list[tuple[str, str]]) -> None:
    assert _errors(text, release) == expected


ACCEPTED = [
    pytest.param(
        CLAIM.format(extra="        tolerations:\n" + "        - {operator: Exists}\n" * 17),
        id="seventeen-tolerations",
    ),
    pytest.param(
        CLAIM.format(extra="").replace(
            "    requests:\n",
            "    constraints:\n    - matchAttribute: example.com/a\n"
            "      distinctAttribute: example.com/b\n    requests:\n",
        ),
        id="constraint-with-both-attributes",
    ),
    pytest.param(
        SLICE.format(extra="    capacity: {memory: {value: null}}\n"), id="null-quantity-is-zero"
    ),
    pytest.param(
        SLICE.format(extra="    capacity: {memory: {value: ' 1Gi'}}\n"), id="quantity-spaces"
    ),
    pytest.param(SLICE.format(extra="    capacity: {memory: {value: Gi}}\n"), id="suffix-alone"),
    pytest.param(
        SLICE.format(extra="    consumesCounters: [{counterSet: s, counters: {memory: {}}}]\n"),
        id="counter-without-value",
    ),
    pytest.param(
        TAINT_RULE.format(
            name="r", device="d", effect="None", extra=", timeAdded: '2026-01-02T15:04:05Z'"
        ),
        id="taint-rule",
    ),
    pytest.param(
        POD.format(pod="", claim="c", uses="[{name: gpu, request: a}, {name: gpu, request: b}]"),
        id="pod-two-requests-of-one-claim",
    ),
    pytest.param(
        SLICE.format(extra="").replace(
            "  nodeName: n\n",
            "  nodeSelector:\n    nodeSelectorTerms:\n"
            "    - matchExpressions: [{key: k, operator: Gt, values: [abc]}]\n",
        ),
        id="node-selector-gt-not-an-integer",
    ),
    pytest.param(
        CLAIM.format(extra="").replace(
            "namespace: default", "namespace: default, finalizers: [example.com/f, orphan]"
        ),
        id="finalizers",
    ),
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_accepted_as_the_server_accepts_it(text: str) -> None:
    assert _errors(text) == []


def test_a_pod_whose_claim_list_is_not_a_list_is_refused_not_a_crash() -> None:
    text = POD.format(pod="", claim="c", uses="[{name: gpu}]").replace(
        "  resourceClaims:\n  - {name: gpu, resourceClaimName: c}\n", "  resourceClaims: 7\n"
    )
    assert ("DRA004", "spec.resourceClaims") in _errors(text)


TEMPLATE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: t, namespace: default}}
spec:
  metadata:
{meta}  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.example.com}}
"""


@pytest.mark.parametrize("release", ["1.37", "1.38"])
def test_a_template_metadata_sets_only_labels_and_annotations(release: str) -> None:
    meta = (
        "    name: fixed\n    namespace: other\n    finalizers: [example.com/f]\n"
        "    labels: {'bad key!': x}\n    annotations: {a: b}\n    creationTimestamp: null\n"
    )
    assert sorted(_errors(TEMPLATE.format(meta=meta), release)) == [
        ("DRA023", "spec.metadata.finalizers"),
        ("DRA023", "spec.metadata.labels[bad key!]"),
        ("DRA023", "spec.metadata.name"),
        ("DRA023", "spec.metadata.namespace"),
    ]
    allowed = "    labels: {app: x}\n    annotations: {a: b}\n"
    assert _errors(TEMPLATE.format(meta=allowed), release) == []


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("1.36", []),
        ("1.37", [("DRA012", "spec.devices.constraints[0].matchAttribute")]),
        ("1.38", [("DRA012", "spec.devices.constraints[0].matchAttribute")]),
    ],
)
def test_a_constraint_names_its_attribute_domain_in_lower_case_from_1_37(
    release: str, expected: list[tuple[str, str]]
) -> None:
    """1.37 checks the constraint's name by its declared format, the domain as written;
    before, the hand-written rule lower-cased it first."""
    text = CLAIM.format(extra="    constraints:\n    - matchAttribute: Gpu.Example.com/model\n")
    assert _errors(text, release) == expected
