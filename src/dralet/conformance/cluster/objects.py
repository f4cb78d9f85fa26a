"""The objects a cluster run creates, as manifests: pure functions, no API calls.

Every one carries ``RUN_LABEL`` with the run's id (a ResourceClaimTemplate passes it on
to the claims made from it), so cleanup finds exactly what this run made and nothing
else. Pods use the probe image: an init container prints what the runtime gave it
(``/dev`` entries, then the environment) into its termination message, which the
kubelet copies into the pod's status; a second container holds the claim until the
pod is deleted, exiting at once on SIGTERM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CLAIM_NAME_IN_POD",
    "HOLD_CONTAINER",
    "MANAGED_BY",
    "PROBE_CONTAINER",
    "RUN_LABEL",
    "device_class",
    "labels",
    "namespace",
    "pod",
    "resource_claim",
    "resource_claim_template",
    "unique_attribute_selector",
]

RUN_LABEL = "conformance.dralet.dev/run"
MANAGED_BY = "dralet-conformance"
CLAIM_NAME_IN_POD = "device"
PROBE_CONTAINER = "probe"
HOLD_CONTAINER = "hold"
DEV_MARKER = "--- /dev"
ENV_MARKER = "--- env"
PROBE_SCRIPT = (
    f"{{ echo '{DEV_MARKER}'; ls -1 /dev | sort; echo '{ENV_MARKER}'; env | sort; }} "
    "> /dev/termination-log"
)
"""The kubelet keeps the last 4096 bytes of the termination message
(k8s.io/kubernetes@v1.37.2 pkg/kubelet/container/runtime.go,
MaxContainerTerminationMessageLength); with service links off the environment is short."""
HOLD_SCRIPT = "trap 'exit 0' TERM; while true; do sleep 1; done"
TERMINATION_GRACE_S = 5
NOBODY = 65534


def labels(run_id: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, "app.kubernetes.io/managed-by": MANAGED_BY}


def namespace(name: str, *, run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels(run_id)},
    }


def device_class(name: str, *, driver: str, version: str, run_id: str) -> dict[str, Any]:
    """A DeviceClass selecting every device of ``driver`` (same shape in every version)."""
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": labels(run_id)},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == {json.dumps(driver)}"}}]},
    }


def _request(*, version: str, device_class: str, selector: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if version == "v1beta1":
        return {"name": CLAIM_NAME_IN_POD, **exactly}
    return {"name": CLAIM_NAME_IN_POD, "exactly": exactly}


def _claim_spec(*, version: str, device_class: str, selector: str) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [_request(version=version, device_class=device_class, selector=selector)]
        }
    }


def resource_claim_template(
    name: str,
    *,
    namespace: str,
    version: str,
    device_class: str,
    run_id: str,
    selector: str = "",
) -> dict[str, Any]:
    """One request of one device of ``device_class`` (narrowed by a CEL ``selector``)."""
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(run_id)},
        "spec": {
            "metadata": {"labels": labels(run_id)},
            "spec": _claim_spec(version=version, device_class=device_class, selector=selector),
        },
    }


def resource_claim(
    name: str, *, namespace: str, version: str, device_class: str, run_id: str
) -> dict[str, Any]:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(run_id)},
        "spec": _claim_spec(version=version, device_class=device_class, selector=""),
    }


def pod(
    name: str,
    *,
    namespace: str,
    node: str,
    image: str,
    run_id: str,
    template: str = "",
    claim: str = "",
) -> dict[str, Any]:
    """A pod pinned to ``node`` whose containers use one claim: made from ``template``,
    or the existing ``claim``; neither, for the baseline probe. It tolerates every
    taint, as the driver's own pods do: the node was chosen by name."""
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    claimed = bool(template or claim)
    container_security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    uses: dict[str, Any] = {"claims": [{"name": CLAIM_NAME_IN_POD}]} if claimed else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(run_id)},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": NOBODY,
                "runAsGroup": NOBODY,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resourceClaims": [{"name": CLAIM_NAME_IN_POD, **source}] if claimed else [],
            "initContainers": [
                {
                    "name": PROBE_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", PROBE_SCRIPT],
                    "resources": uses,
                    "securityContext": container_security,
                }
            ],
            "containers": [
                {
                    "name": HOLD_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", HOLD_SCRIPT],
                    "resources": uses,
                    "securityContext": container_security,
                }
            ],
        },
    }


def _cel_value(value: Mapping[str, Any]) -> str | None:
    """A DeviceAttribute's value as a CEL literal; None for a version (compared only
    through semver functions) or an unknown type."""
    if "string" in value:
        return json.dumps(str(value["string"]))
    if "int" in value:
        return str(int(value["int"]))
    if "bool" in value:
        return "true" if value["bool"] else "false"
    return None


def unique_attribute_selector(
    devices: Mapping[str, Mapping[str, Any]], device: str, *, driver: str
) -> str:
    """A CEL selector matching ``device`` alone among ``devices`` (name -> attributes as
    the slice has them), from an attribute whose value no other device shares; '' if
    there is none. An unqualified attribute name is in the driver's domain
    (k8s.io/api@v0.37.2 resource/v1/types.go, QualifiedName)."""
    own = devices.get(device) or {}
    for key in sorted(own):
        literal = _cel_value(own[key])
        if literal is None:
            continue
        if any(
            other != device and attributes.get(key) == own[key]
            for other, attributes in devices.items()
        ):
            continue
        domain, _, attribute = key.rpartition("/")
        where = f"[{json.dumps(domain or driver)}][{json.dumps(attribute)}]"
        return f"device.attributes{where} == {literal}"
    return ""
