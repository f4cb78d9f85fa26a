"""The chart's ValidatingAdmissionPolicies, evaluated as the API server would.

Each policy's matchConditions, variables and validations are compiled with the CEL
runtime dralet uses (cel-expr-python, with the optional and strings extensions the API
server enables) and run against admission requests: the driver pod on node-a may write
node-a's ResourceSlices of its own driver and nothing else, and may change only its own
finalizer on a ResourceClaim. Variables are evaluated in order into ``variables``, and a
request is allowed when a match condition is false or every validation is true, as the
admission plugin does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings
from google.protobuf import descriptor_pool
from tests.deploy.conftest import KUBERNETES_VERSIONS, NAMESPACE

Document = dict[str, Any]
Render = Callable[..., tuple[Document, ...]]

DRIVER = "gpu.example.com"
FINALIZER = f"{DRIVER}/prepared"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Verdict:
    matched: bool
    refusals: tuple[str, ...]

    @property
    def allowed(self) -> bool:
        return not self.matched or not self.refusals


def _environment() -> cel.Env:
    return cel.NewEnv(
        descriptor_pool.Default(),
        variables={name: cel.Type.DYN for name in ("request", "object", "oldObject", "variables")},
        extensions=[ext_strings.ExtStrings(2), ext_optional.ExtOptional()],
    )


def _plain(value: Any) -> Any:
    """A CEL result as plain Python values (lists and maps hold CEL item wrappers)."""
    if isinstance(value, list):
        return [_plain(item.value()) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item.value()) for key, item in value.items()}
    return value


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = _environment()
    result = environment.compile(expression).eval(environment.Activation(activation))
    if result.type() == cel.Type.ERROR:
        raise AssertionError(f"{expression!r} failed: {result.value()}")
    return _plain(result.value())


def admit(policy: Document, request: Document) -> Verdict:
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "request": request,
        "object": request.get("object"),
        "oldObject": request.get("oldObject"),
        "variables": {},
    }
    (rule,) = spec["matchConstraints"]["resourceRules"]
    if request["operation"] not in rule["operations"]:
        return Verdict(matched=False, refusals=())
    for condition in spec.get("matchConditions", []):
        if _evaluate(condition["expression"], activation) is not True:
            return Verdict(matched=False, refusals=())
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = variables
        variables[variable["name"]] = _evaluate(variable["expression"], activation)
    activation["variables"] = variables
    refusals = []
    for validation in spec["validations"]:
        if _evaluate(validation["expression"], activation) is not True:
            message = validation.get("message") or _evaluate(
                validation["messageExpression"], activation
            )
            refusals.append(str(message))
    return Verdict(matched=True, refusals=tuple(refusals))


def user(node: str | None, *, account: str = "dralet-kubelet-plugin") -> Document:
    extra = {NODE_NAME_EXTRA: [node]} if node is not None else {}
    return {"username": f"system:serviceaccount:{NAMESPACE}:{account}", "extra": extra}


def resource_slice(node: str, driver: str = DRIVER) -> Document:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-x"},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}},
    }


def admission_request(
    operation: str, who: Document, new: Document | None, old: Document | None
) -> Document:
    return {"operation": operation, "userInfo": who, "object": new, "oldObject": old}


def claim(finalizers: list[str], **labels: str) -> Document:
    metadata: Document = {"name": "c", "namespace": "work", "finalizers": finalizers}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata}


def policy(documents: tuple[Document, ...], resource: str) -> Document:
    (found,) = [
        d
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicy"
        and resource in d["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
    ]
    return found


@pytest.fixture(scope="module")
def slices_policy(render: Render) -> Document:
    return policy(render("1.34"), "resourceslices")


@pytest.fixture(scope="module")
def claims_policy(render: Render) -> Document:
    return policy(render("1.34"), "resourceclaims")


ON_A = user("node-a")


@pytest.mark.parametrize(
    ("operation", "new", "old"),
    [
        ("CREATE", resource_slice("node-a"), None),
        ("UPDATE", resource_slice("node-a"), resource_slice("node-a")),
        ("DELETE", None, resource_slice("node-a")),
    ],
)
def test_a_driver_pod_writes_its_own_nodes_slices(
    slices_policy: Document, operation: str, new: Document | None, old: Document | None
) -> None:
    verdict = admit(slices_policy, admission_request(operation, ON_A, new, old))
    assert verdict.matched
    assert verdict.allowed, verdict.refusals


@pytest.mark.parametrize(
    ("operation", "new", "old", "reason"),
    [
        ("CREATE", resource_slice("node-b"), None, "of node node-a only"),
        ("UPDATE", resource_slice("node-b"), resource_slice("node-b"), "of node node-a only"),
        ("UPDATE", resource_slice("node-a"), resource_slice("node-b"), "of node node-a only"),
        ("DELETE", None, resource_slice("node-b"), "of node node-a only"),
        ("CREATE", resource_slice("node-a", "other.example.com"), None, f"driver {DRIVER} only"),
        (
            "UPDATE",
            resource_slice("node-a"),
            resource_slice("node-a", "other.example.com"),
            f"driver {DRIVER} only",
        ),
    ],
)
def test_a_driver_pod_is_refused_other_nodes_and_drivers(
    slices_policy: Document,
    operation: str,
    new: Document | None,
    old: Document | None,
    reason: str,
) -> None:
    verdict = admit(slices_policy, admission_request(operation, ON_A, new, old))
    assert not verdict.allowed
    assert any(reason in r for r in verdict.refusals), verdict.refusals


def test_a_token_without_a_node_is_refused(slices_policy: Document) -> None:
    for who in (user(None), user("")):
        verdict = admit(
            slices_policy, admission_request("CREATE", who, resource_slice("node-a"), None)
        )
        assert not verdict.allowed
        assert any("names no node" in r for r in verdict.refusals)


def test_other_users_are_not_matched(slices_policy: Document, claims_policy: Document) -> None:
    kubelet = {"username": "system:node:node-b", "extra": {}}
    other = user("node-a", account="someone-else")
    for who in (kubelet, other):
        request = admission_request("CREATE", who, resource_slice("node-b"), None)
        assert not admit(slices_policy, request).matched
        request = admission_request("UPDATE", who, claim([]), claim(["x/y"]))
        assert not admit(claims_policy, request).matched


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (claim(["keep/me"]), claim(["keep/me", FINALIZER])),
        (claim(["keep/me", FINALIZER]), claim(["keep/me"])),
        (claim([FINALIZER], app="x"), claim([], app="x")),
    ],
    ids=["add", "remove", "remove-last"],
)
def test_the_driver_changes_its_own_finalizer(
    claims_policy: Document, old: Document, new: Document
) -> None:
    verdict = admit(claims_policy, admission_request("UPDATE", ON_A, new, old))
    assert verdict.matched
    assert verdict.allowed, verdict.refusals


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (claim(["keep/me", FINALIZER]), claim([FINALIZER])),
        (claim([FINALIZER]), claim([FINALIZER, "other/finalizer"])),
        (claim([FINALIZER]), claim([FINALIZER], app="changed")),
        (claim([FINALIZER], app="x"), claim([FINALIZER])),
    ],
    ids=["drops-another-finalizer", "adds-another-finalizer", "adds-label", "drops-label"],
)
def test_the_driver_changes_nothing_else_on_a_claim(
    claims_policy: Document, old: Document, new: Document
) -> None:
    verdict = admit(claims_policy, admission_request("UPDATE", ON_A, new, old))
    assert not verdict.allowed


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_policies_and_bindings_for_every_version(render: Render, version: str) -> None:
    documents = render(version)
    policies = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(policies) == 2
    assert {b["spec"]["policyName"] for b in bindings} == {p["metadata"]["name"] for p in policies}
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
    for found in policies:
        assert found["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert found["spec"]["failurePolicy"] == "Fail"
        (rule,) = found["spec"]["matchConstraints"]["resourceRules"]
        assert rule["apiGroups"] == ["resource.k8s.io"]
        assert rule["apiVersions"] == ["*"]  # every served resource.k8s.io version
    account = only_account(documents)
    slices = policy(documents, "resourceslices")
    assert slices["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == [
        "CREATE",
        "UPDATE",
        "DELETE",
    ]
    (condition,) = slices["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{NAMESPACE}:{account}"' in condition["expression"]


def only_account(documents: tuple[Document, ...]) -> str:
    (account,) = [d for d in documents if d["kind"] == "ServiceAccount"]
    return str(account["metadata"]["name"])


def test_policies_can_be_turned_off(render: Render) -> None:
    documents = render("1.34", (("admissionPolicies.enabled", "false"),))
    assert not [d for d in documents if d["kind"].startswith("ValidatingAdmissionPolicy")]
