"""The catalogue of every rule ``dralet validate`` reports: id, severity, a one-line
title, why it matters, how to fix it, and a bad and a good example (``--explain ID``).

DRA0xx are what the API server itself refuses (parse, schema, semantic rules, CEL);
DRA1xx are lint rules for mistakes the API server accepts but that break or endanger
scheduling and node preparation.
"""

from __future__ import annotations

from dataclasses import dataclass

from dralet.validation.diagnostics import Severity

__all__ = ["RULES", "Rule", "rule"]


@dataclass(frozen=True)
class Rule:
    """One rule; ``why`` and ``fix`` are single lines, the examples short manifests."""

    id: str
    severity: Severity
    title: str
    why: str
    fix: str
    bad: str
    good: str


_E = Severity.ERROR
_W = Severity.WARNING

_REQUEST_V1BETA1 = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{name: gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        deviceClassName: gpu.example.com
{extra}"""

_SLICE = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {{name: node-1-gpu}}
spec:
  driver: gpu.example.com
  pool: {{name: node-1, generation: 0, resourceSliceCount: 1}}
  nodeName: node-1
  devices:
  - name: {device}
    basic:
      attributes:
{attributes}"""

_POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: train}}
spec:
{claims}  containers:
  - name: main
    image: registry.example.com/train:1
    resources:
{resources}"""

_NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: gpu-admin
  labels: {labels}
"""

_ADMIN_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: debug-gpus, namespace: gpu-admin}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.example.com, allocationMode: All, adminAccess: true}
"""

_TAINT_RULE = """\
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {{name: maintenance}}
spec:
{selector}  taint: {{key: example.com/maintenance, effect: NoSchedule}}
"""

_ALL: tuple[Rule, ...] = (
    Rule(
        "DRA001",
        _E,
        "file is not valid YAML or JSON",
        "Nothing in a file that does not parse can be applied or checked.",
        "Fix the syntax at the reported position (indentation, quoting, duplicate keys).",
        "metadata:\n  name: gpu\n   labels: {}\n",
        "metadata:\n  name: gpu\n  labels: {}\n",
    ),
    Rule(
        "DRA002",
        _W,
        "document is not a Kubernetes object",
        "A document without apiVersion and kind is skipped by kubectl and by this check.",
        "Add apiVersion and kind, or keep non-manifest YAML out of the checked paths.",
        "replicas: 3\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {replicas: '3'}\n",
    ),
    Rule(
        "DRA003",
        _E,
        "apiVersion not served by the target Kubernetes version",
        "The API server refuses objects of an API version it does not serve.",
        "Use a served version: resource.k8s.io/v1beta1 on 1.32, v1beta2 from 1.33, v1 from 1.34.",
        "# --kubernetes-version 1.32\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"
        "metadata: {name: gpu.example.com}\n",
        "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\n"
        "metadata: {name: gpu.example.com}\n",
    ),
    Rule(
        "DRA004",
        _E,
        "does not match the Kubernetes schema",
        "Unknown fields, wrong types and missing required fields are refused by the API server "
        "(strict field validation) or silently dropped.",
        "Correct the field's name, type or placement for the object's apiVersion.",
        _REQUEST_V1BETA1.format(extra="        count: two\n"),
        _REQUEST_V1BETA1.format(extra="        count: 2\n"),
    ),
    Rule(
        "DRA005",
        _E,
        "apiVersion or kind key is mis-cased",
        "Keys are case-sensitive: kubectl refuses a document with `apiversion:` or `Kind:`, "
        "so nothing in it is applied.",
        "Spell the keys `apiVersion` and `kind`.",
        "apiversion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n",
    ),
    Rule(
        "DRA006",
        _W,
        "kind not checked",
        "dralet checks the DRA kinds, workloads and every kind the target release serves built "
        "in; a custom resource or an unknown apiVersion/kind is reported and not counted as "
        "checked, so a typo in `kind` does not pass silently.",
        "Fix the apiVersion/kind, or keep custom resources out of the checked paths.",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClas\nmetadata: {name: gpu.example.com}\n",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.example.com}\n",
    ),
    Rule(
        "DRA010",
        _E,
        "allocationMode is neither ExactCount nor All",
        "A device request supports only ExactCount and All; WaitForFirstConsumer and Immediate "
        "were claim-level modes of the removed v1alpha2 API and are refused.",
        "Remove allocationMode (it defaults to ExactCount, allocated when the pod is scheduled) "
        "or set All.",
        _REQUEST_V1BETA1.format(extra="        allocationMode: WaitForFirstConsumer\n"),
        _REQUEST_V1BETA1.format(extra="        allocationMode: ExactCount\n        count: 1\n"),
    ),
    Rule(
        "DRA011",
        _E,
        "count is invalid for the allocation mode",
        "With ExactCount the count must be greater than zero; with All it must not be set.",
        "Set count to 1 or more with ExactCount, or remove count with allocationMode All.",
        _REQUEST_V1BETA1.format(extra="        allocationMode: All\n        count: 2\n"),
        _REQUEST_V1BETA1.format(extra="        allocationMode: All\n"),
    ),
    Rule(
        "DRA012",
        _E,
        "name has the wrong format",
        "The API server checks every name: DNS labels for requests and devices, DNS subdomains "
        "for objects, classes and pools, driver names, and qualified names (C identifiers of at "
        "most 32 characters, with an optional domain) for attributes and capacities.",
        "Rename to the format the message states (lower-case letters, digits, '-' and '.').",
        _REQUEST_V1BETA1.format(extra="").replace("- name: gpu", "- name: GPU_0"),
        _REQUEST_V1BETA1.format(extra="").replace("- name: gpu", "- name: gpu-0"),
    ),
    Rule(
        "DRA013",
        _E,
        "list or map exceeds its limit",
        "The API server caps lists: 32 requests, selectors, constraints and configs, 8 "
        "subrequests, 128 devices per slice (64 from 1.35 when devices use taints or counters), "
        "8 counter sets of 32 counters, 32 attributes and capacities per device.",
        "Split the object (more slices, fewer requests per claim) or merge entries.",
        "# a ResourceSlice with 129 devices\n",
        "# two ResourceSlices of the same pool (resourceSliceCount: 2), 64 + 65 devices\n",
    ),
    Rule(
        "DRA014",
        _E,
        "attribute or capacity value is invalid",
        "An attribute sets exactly one of int, bool, string or version; strings and versions "
        "are at most 64 characters, versions strict semver; capacities must be quantities.",
        "Set one value of the right type: version: 1.2.3 (no 'v'), capacity value: 80Gi.",
        _SLICE.format(device="gpu-0", attributes="        driverVersion: {version: v550.54}\n"),
        _SLICE.format(device="gpu-0", attributes="        driverVersion: {version: 550.54.0}\n"),
    ),
    Rule(
        "DRA015",
        _E,
        "node selection is missing, ambiguous or malformed",
        "A slice names where its devices are with exactly one of nodeName, nodeSelector, allNodes "
        "(or perDeviceNodeSelection where it exists); a nodeSelector has exactly one term.",
        "Keep exactly one of the fields; node-local drivers set nodeName.",
        _SLICE.format(device="gpu-0", attributes="        model: {string: H100}\n").replace(
            "  nodeName: node-1\n", "  nodeName: node-1\n  allNodes: true\n"
        ),
        _SLICE.format(device="gpu-0", attributes="        model: {string: H100}\n"),
    ),
    Rule(
        "DRA016",
        _E,
        "duplicate name",
        "Request names must be unique in a claim and device names unique in a slice (and pool); "
        "duplicates are refused or make the pool invalid for the scheduler.",
        "Give every request and every device its own name.",
        "requests:\n- {name: gpu, deviceClassName: gpu.example.com}\n"
        "- {name: gpu, deviceClassName: gpu.example.com}\n",
        "requests:\n- {name: gpu-0, deviceClassName: gpu.example.com}\n"
        "- {name: gpu-1, deviceClassName: gpu.example.com}\n",
    ),
    Rule(
        "DRA017",
        _E,
        "constraint or config names an unknown request",
        "Constraint and config 'requests' entries must be names of requests in the same claim.",
        "Use a request name from spec.devices.requests (or request/subrequest).",
        "constraints:\n- requests: [gpus]\n  matchAttribute: gpu.example.com/numa\n",
        "constraints:\n- requests: [gpu]\n  matchAttribute: gpu.example.com/numa\n",
    ),
    Rule(
        "DRA018",
        _E,
        "required field missing or fields that exclude each other",
        "The API server requires a class per request, cel per selector, matchAttribute per "
        "constraint, opaque per config, and exactly one of "
        "exactly/firstAvailable per v1/v1beta2 request.",
        "Add the named field, or remove the field the message says may not be combined.",
        "requests:\n- name: gpu\n  exactly: {deviceClassName: gpu.example.com}\n"
        "  firstAvailable: [{name: big, deviceClassName: big-gpu.example.com}]\n",
        "requests:\n- name: gpu\n  exactly: {deviceClassName: gpu.example.com}\n",
    ),
    Rule(
        "DRA019",
        _E,
        "opaque configuration parameters are invalid",
        "Opaque parameters must be a non-empty JSON object of at most 10 KiB, for a valid "
        "driver name.",
        "Make parameters an object (e.g. {apiVersion: ..., kind: ...}) under 10 KiB.",
        "config:\n- opaque:\n    driver: gpu.example.com\n    parameters: [sharing]\n",
        "config:\n- opaque:\n    driver: gpu.example.com\n"
        "    parameters: {apiVersion: gpu.example.com/v1, kind: GpuConfig}\n",
    ),
    Rule(
        "DRA020",
        _E,
        "CEL selector does not compile",
        "The API server compiles every selector in the DRA CEL environment and refuses those "
        "that fail or do not return bool.",
        'Fix the expression at the reported column; use device.attributes["domain"].name.',
        'selectors:\n- cel:\n    expression: device.attributes["gpu.example.com"].model = "H100"\n',
        "selectors:\n- cel:\n    expression: "
        'device.attributes["gpu.example.com"].model == "H100"\n',
    ),
    Rule(
        "DRA021",
        _E,
        "CEL selector is too long",
        "Selector expressions are limited to 10 KiB.",
        "Shorten the expression, or move common conditions into the DeviceClass.",
        "# an expression of 10241 characters\n",
        "# an expression of at most 10240 characters\n",
    ),
    Rule(
        "DRA025",
        _E,
        "CEL selector is too complex",
        "The API server estimates each selector's worst-case cost over the largest devices "
        "the API allows (32 attributes, 64-character values, 48 list items) and refuses one "
        "over 1,000,000 units: too complex, exceeds cost limit.",
        "Avoid nested macros over attribute maps and long regular expressions; test a known "
        "attribute directly instead of scanning all of them.",
        "selectors:\n- cel:\n    expression: device.attributes.all(d, device.attributes.all("
        "e, device.attributes[d].all(a, device.attributes[e].all(b, a != b))))\n",
        "selectors:\n- cel:\n    expression: "
        'device.attributes["gpu.example.com"].model == "H100"\n',
    ),
    Rule(
        "DRA022",
        _E,
        "pool generation or slice count is invalid",
        "pool.generation must be zero or more and pool.resourceSliceCount more than zero.",
        "Start generation at 0 and set resourceSliceCount to the number of slices in the pool.",
        "pool: {name: node-1, generation: -1, resourceSliceCount: 0}\n",
        "pool: {name: node-1, generation: 0, resourceSliceCount: 1}\n",
    ),
    Rule(
        "DRA023",
        _E,
        "object metadata is invalid",
        "The API server requires a name or generateName and checks label keys and values, "
        "annotation keys and the annotations' total size (256 KiB).",
        "Give the object a name; use label values of at most 63 letters, digits, '-', '_' or "
        "'.', and qualified keys (optional DNS-subdomain prefix, '/', name).",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n"
        "  labels: {tier: gold plated}\n",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n"
        "  name: gpu.example.com\n  labels: {tier: gold-plated}\n",
    ),
    Rule(
        "DRA024",
        _E,
        "device taint or toleration is invalid",
        "A device taint needs a label-key `key`, a label-value `value` and an effect the "
        "release knows (NoSchedule, NoExecute; None from 1.35). A toleration's operator is "
        "Equal or Exists (no value with Exists), its key a label key, its value a label value.",
        "Use a qualified key, a short value and a supported effect.",
        "taints:\n- {key: example.com/unhealthy, value: 'power supply', effect: Evict}\n",
        "taints:\n- {key: example.com/unhealthy, value: power-supply, effect: NoExecute}\n",
    ),
    Rule(
        "DRA026",
        _E,
        "admin access in a namespace without the admin-access label",
        "Admission refuses a ResourceClaim or ResourceClaimTemplate that asks for adminAccess "
        'unless its namespace carries resource.kubernetes.io/admin-access: "true"; the '
        "Namespace is in the checked files without that label.",
        "Label the namespace (only namespaces for cluster administrators), or drop adminAccess.",
        _NAMESPACE.format(labels="{}") + "---\n" + _ADMIN_CLAIM,
        _NAMESPACE.format(labels="{resource.kubernetes.io/admin-access: 'true'}")
        + "---\n"
        + _ADMIN_CLAIM,
    ),
    Rule(
        "DRA101",
        _W,
        "legacy extended resource beside or instead of DRA claims",
        "Device-plugin extended resources (e.g. nvidia.com/gpu) and DRA claims are separate "
        "mechanisms; a device managed by both can be handed out twice.",
        "Request the device through a ResourceClaim(Template) and drop the extended resource "
        "(or back it with a DeviceClass extendedResourceName from 1.34).",
        _POD.format(
            claims="  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: gpu}\n",
            resources="      limits: {nvidia.com/gpu: 1}\n      claims: [{name: gpu}]\n",
        ),
        _POD.format(
            claims="  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: gpu}\n",
            resources="      claims: [{name: gpu}]\n",
        ),
    ),
    Rule(
        "DRA102",
        _E,
        "container uses a claim the pod does not declare",
        "resources.claims[].name must be one of the pod's spec.resourceClaims names; the API "
        "server refuses the pod otherwise.",
        "Declare the claim in spec.resourceClaims or correct the name.",
        _POD.format(claims="", resources="      claims: [{name: gpu}]\n"),
        _POD.format(
            claims="  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: gpu}\n",
            resources="      claims: [{name: gpu}]\n",
        ),
    ),
    Rule(
        "DRA103",
        _E,
        "container uses a request the claim does not have",
        "resources.claims[].request must name a request of the referenced claim or template; "
        "otherwise the container cannot get the devices it asks for.",
        "Use one of the claim's request names (see its spec.devices.requests).",
        _POD.format(
            claims="  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: gpu}\n",
            resources="      claims: [{name: gpu, request: gpus}]\n",
        ),
        _POD.format(
            claims="  resourceClaims:\n  - {name: gpu, resourceClaimTemplateName: gpu}\n",
            resources="      claims: [{name: gpu, request: gpu}]\n",
        ),
    ),
    Rule(
        "DRA104",
        _W,
        "ResourceClaim shared by different workloads without stated intent",
        "Pods of different owners that name one ResourceClaim all get the same devices, which "
        "is usually a copy-paste mistake where a ResourceClaimTemplate was meant.",
        "Use resourceClaimTemplateName for per-pod devices, or state the sharing with the "
        'annotation resource.dralet.dev/shared-claim: "true" on the claim or the workloads.',
        "# Deployment a and Job b both set resourceClaimName: shared-gpu\n",
        '# ResourceClaim shared-gpu carries resource.dralet.dev/shared-claim: "true"\n',
    ),
    Rule(
        "DRA105",
        _W,
        "selectors match no device in the given slices",
        "When the checked files include ResourceSlices, a request or class whose selectors match "
        "none of their devices can never be allocated from them.",
        "Correct the attribute names or values in the selector, or publish matching devices.",
        'expression: device.attributes["gpu.example.com"].model == "H200"  # slices have H100\n',
        'expression: device.attributes["gpu.example.com"].model == "H100"\n',
    ),
    Rule(
        "DRA106",
        _W,
        "device or driver name is not safe in a CDI device name",
        "Drivers hand devices to runtimes as CDI names vendor/class=device; a driver name must "
        "be a valid CDI vendor (start with a letter, at least 2 characters) and a device name a "
        "valid CDI device name.",
        "Rename the device (letters, digits, '-', '_', '.', ':') or the driver.",
        _SLICE.format(device="gpu/0", attributes="        model: {string: H100}\n"),
        _SLICE.format(device="gpu-0", attributes="        model: {string: H100}\n"),
    ),
    Rule(
        "DRA107",
        _W,
        "selector fails at run time on a published device",
        "A CEL runtime error (such as a missing attribute) aborts scheduling of the pod instead "
        "of skipping the device.",
        'Guard lookups: "name" in device.attributes["domain"] && ...',
        'expression: device.attributes["gpu.example.com"].numa == 0  # not all devices have numa\n',
        'expression: \'"numa" in device.attributes["gpu.example.com"] && '
        'device.attributes["gpu.example.com"].numa == 0\'\n',
    ),
    Rule(
        "DRA108",
        _W,
        "object defined twice",
        "Two manifests with the same kind, namespace and name: the later one replaces the "
        "earlier when applied, and only one of them reaches the cluster.",
        "Rename one of them or delete the copy.",
        "# a.yaml and b.yaml both hold\nkind: ResourceClaim\nmetadata: {name: gpu}\n",
        "# a.yaml\nkind: ResourceClaim\nmetadata: {name: gpu}\n"
        "# b.yaml\nkind: ResourceClaim\nmetadata: {name: gpu-large}\n",
    ),
    Rule(
        "DRA110",
        _W,
        "admin access needs a labelled namespace",
        "Admission refuses a claim or template asking for adminAccess unless its namespace "
        'carries resource.kubernetes.io/admin-access: "true"; the checked files do not '
        "hold that Namespace, so whether it has the label is unknown.",
        "Make sure the namespace has the label, or validate the Namespace manifest with it.",
        _ADMIN_CLAIM,
        _NAMESPACE.format(labels="{resource.kubernetes.io/admin-access: 'true'}")
        + "---\n"
        + _ADMIN_CLAIM,
    ),
    Rule(
        "DRA111",
        _W,
        "DeviceTaintRule selects no device or every device",
        "A rule without spec.deviceSelector taints no device (Kubernetes 1.37.1 on; 1.37.0 "
        "tainted every device), and an empty deviceSelector taints every device of every "
        "driver in the cluster (the API server warns about it from 1.38).",
        "Name the driver, pool or device the taint is for.",
        _TAINT_RULE.format(selector="  deviceSelector: {}\n"),
        _TAINT_RULE.format(selector="  deviceSelector: {driver: gpu.example.com, pool: node-1}\n"),
    ),
    Rule(
        "DRA109",
        _W,
        "deprecated API version",
        "The target release still serves this resource.k8s.io version but deprecates it: "
        "v1beta1 since 1.35 (gone in 1.38), v1beta2 since 1.36 (gone in 1.39).",
        "Move the object to resource.k8s.io/v1 (served from 1.34).",
        "# -k 1.37\napiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\n"
        "metadata: {name: gpu}\n",
        "# -k 1.37\napiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\n",
    ),
)

RULES: dict[str, Rule] = {r.id: r for r in _ALL}


def rule(rule_id: str) -> Rule:
    """The rule with this id; raises ``KeyError`` for an unknown id."""
    return RULES[rule_id.upper()]
