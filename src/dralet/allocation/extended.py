"""Extended resources backed by DRA: a container that requests
``deviceclass.resource.kubernetes.io/<class>`` (or a class's ``extendedResourceName``)
gets devices of that class, through one claim the scheduler makes for the pod.

Owns the scheduler's rules (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/
dynamicresources/extendeddynamicresources.go, and @v1.38.0-beta.0): which names are
extended resources (pkg/scheduler/util IsDRAExtendedResourceName), which class backs a
name (the implicit name always; of classes naming the same ``extendedResourceName`` the
newest, then the lowest name: k8s.io/dynamic-resource-allocation@v0.37.2
deviceclass/extendedresourcecache), and the claim's requests: per resource, in name
order, one ExactCount request per long-lived container (regular containers and sidecars)
named ``container-<i>-request-<j>`` (``i`` the container's index among init containers
then containers, ``j`` the resource's index among the container's sorted request names),
and for the init containers that end before them one request, the largest of what each
needs beyond what the long-lived containers after it hold. A node that lists the resource
in its allocatable serves it by device plugin instead: Nodes' allocatable is not read,
so every node is taken to serve it by DRA.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dralet.allocation import model, quantity

__all__ = [
    "DEVICE_CLASS_PREFIX",
    "claim_for",
    "class_for",
    "container_requests",
    "is_extended_resource_name",
]

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""The implicit extended resource name of every DeviceClass (k8s.io/api@v0.37.2
resource/v1 ResourceDeviceClassPrefix)."""
_NATIVE_DOMAIN = "kubernetes.io"
_QUOTA_PREFIX = "requests."
CLAIM_SUFFIX = "-extended-resources"
"""The scheduler names the claim ``<pod>-extended-resources-<random>``; simulate leaves
out the random part."""
SIDECAR_RESTART_POLICY = "Always"


def is_extended_resource_name(name: str) -> bool:
    """A name outside the kubernetes.io domains with a domain, or the implicit one."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    domain, slash, _ = name.partition("/")
    if not slash or name.startswith(_QUOTA_PREFIX):
        return False
    return domain != _NATIVE_DOMAIN and not domain.endswith(f".{_NATIVE_DOMAIN}")


def _integer(value: Any) -> int | None:
    try:
        amount = quantity.parse_quantity(str(value))
    except ValueError:
        return None
    return int(amount) if amount.denominator == 1 and amount > 0 else None


def container_requests(spec: Mapping[str, Any]) -> tuple[model.ContainerRequests, ...]:
    """The pod spec's containers that request extended resources."""
    out = []
    init = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
    regular = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    for index, container in enumerate([*init, *regular]):
        resources = container.get("resources")
        requests = resources.get("requests") if isinstance(resources, Mapping) else None
        if not isinstance(requests, Mapping):
            continue
        wanted = {}
        for name, value in requests.items():
            if is_extended_resource_name(str(name)):
                amount = _integer(value)
                if amount is not None:
                    wanted[str(name)] = amount
        if not wanted:
            continue
        sidecar = container.get("restartPolicy") == SIDECAR_RESTART_POLICY
        out.append(
            model.ContainerRequests(
                name=str(container.get("name", "")),
                index=index,
                short_lived=index < len(init) and not sidecar,
                requests=wanted,
                names=tuple(sorted(str(n) for n in requests)),
            )
        )
    return tuple(out)


def class_for(resource: str, classes: Iterable[model.DeviceClass]) -> model.DeviceClass | None:
    """The DeviceClass that backs an extended resource name, if any."""
    known = list(classes)
    if resource.startswith(DEVICE_CLASS_PREFIX):
        wanted = resource.removeprefix(DEVICE_CLASS_PREFIX)
        implicit = [c for c in known if c.name == wanted]
        if implicit:
            return implicit[0]
    named = [c for c in known if c.extended_resource_name == resource]
    if not named:
        return None
    newest = max(c.created for c in named)
    return min((c for c in named if c.created == newest), key=lambda c: c.name)


def _request(name: str, class_name: str, count: int) -> model.DeviceRequest:
    sub = model.DeviceSubRequest(name=name, device_class_name=class_name, count=count)
    return model.DeviceRequest(name=name, alternatives=(sub,))


def _requests_for(resource: str, class_name: str, pod: model.Pod) -> list[model.DeviceRequest]:
    long_lived: dict[int, tuple[str, int]] = {}
    for container in pod.containers:
        count = container.requests.get(resource)
        if count and not container.short_lived:
            long_lived[container.index] = (_name(container, resource), count)
    out = [_request(name, class_name, count) for name, count in long_lived.values()]
    largest: tuple[str, int] | None = None
    for container in pod.containers:
        count = container.requests.get(resource)
        if not count or not container.short_lived:
            continue
        held = sum(c for i, (_, c) in long_lived.items() if i >= container.index)
        if held >= count:
            continue
        extra = (_name(container, resource), count - held)
        if largest is None or largest[1] < extra[1]:
            largest = extra
    if largest is not None:
        out.append(_request(largest[0], class_name, largest[1]))
    return out


def _name(container: model.ContainerRequests, resource: str) -> str:
    return f"container-{container.index}-request-{container.names.index(resource)}"


def claim_for(
    pod: model.Pod, classes: Iterable[model.DeviceClass]
) -> tuple[model.ResourceClaim | None, tuple[str, ...]]:
    """The claim the scheduler makes for the pod's extended resources backed by DRA (None
    when there are none), and the implicit names that no class backs."""
    known = list(classes)
    requests: list[model.DeviceRequest] = []
    unbacked: list[str] = []
    resources = sorted({r for c in pod.containers for r in c.requests})
    for resource in resources:
        device_class = class_for(resource, known)
        if device_class is None:
            if resource.startswith(DEVICE_CLASS_PREFIX):
                unbacked.append(resource)
            continue
        requests.extend(_requests_for(resource, device_class.name, pod))
    if not requests:
        return None, tuple(unbacked)
    requests.sort(key=lambda r: r.name)
    claim = model.ResourceClaim(
        namespace=pod.namespace, name=f"{pod.name}{CLAIM_SUFFIX}", requests=tuple(requests)
    )
    return claim, tuple(unbacked)
