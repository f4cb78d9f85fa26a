"""The Kubernetes versions dralet validates against, which resource.k8s.io versions each
serves, and which fields each (Kubernetes version, API version) pair has.

Facts: v1beta1 arrives in 1.32 (flat requests, devices wrapped in ``basic``); 1.33 adds
v1beta2 (``exactly``/``firstAvailable`` requests, flat devices) and grows v1beta1 with
``firstAvailable``, per-device node selection and taints; 1.34 serves v1 (the v1beta2
shape) and adds ``distinctAttribute``; 1.35 raises the per-device taint limit to 16,
caps a slice with taints or counter consumption at 64 devices and sets the counter
limits below; 1.36 counts list-type attributes as such a feature too; 1.38 tightens the
name, node selector and version rules below. v1beta1 is deprecated from 1.35 and gone in
1.38, v1beta2 deprecated from 1.36 and gone in 1.39.
v1alpha3 is an alpha API that dralet does not support.

Sources: k8s.io/api v0.33.0-v0.37.2 resource/v1beta2 and v1 types.go (the limits by
their upstream names below) and resource/v1beta1, v1beta2
zz_generated.prerelease-lifecycle.go (deprecated and removed releases).
"""

from __future__ import annotations

from dataclasses import dataclass

from dralet import kubenames, releases
from dralet.gates import gate

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "DRA_KINDS",
    "RESOURCE_GROUP",
    "SUPPORTED_KUBERNETES_VERSIONS",
    "WORKLOAD_KINDS",
    "ApiShape",
    "Target",
    "WorkloadKind",
]

RESOURCE_GROUP = "resource.k8s.io"
DRA_KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
SUPPORTED_KUBERNETES_VERSIONS = releases.through("1.38")
"""The releases whose API rules (below) dralet validates against."""
DEFAULT_KUBERNETES_VERSION = releases.newest(SUPPORTED_KUBERNETES_VERSIONS)


def _on_from(name: str) -> int:
    on = gate(name).on_from
    assert on is not None, f"{name} is on by default in no release"
    return on


_SERVED_FROM = {"v1beta1": 32, "v1beta2": 33, "v1": 34}
"""The minor Kubernetes release that first serves each resource.k8s.io version."""
_DEPRECATED_FROM = {"v1beta1": 35, "v1beta2": 36}
_REMOVED_IN = {"v1beta1": 38, "v1beta2": 39}
"""The minor release that no longer serves a version (k8s.io/api v0.38.0-beta.0
resource/v1beta1 zz_generated.prerelease-lifecycle.go: APILifecycleRemoved 1.38)."""
_ADVANCED_DEVICES_LIMIT_FROM = 35
"""ResourceSliceMaxDevicesWithTaintsOrConsumesCounters (1.35), renamed
ResourceSliceMaxDevicesWithAdvancedFeatures in 1.36: 64 instead of 128."""
_LIST_ATTRIBUTES_ADVANCED_FROM = 36
_LIST_ATTRIBUTES_FROM = gate("DRAListTypeAttributes").alpha_from
"""DRAListTypeAttributes is alpha and off by default (``dralet.gates``). With the gate off
the API server drops list values on create, which leaves such an attribute with no value."""
_CONSUMABLE_CAPACITY_FROM = _on_from("DRAConsumableCapacity")
_ADVANCED_DEVICES_MAX = 64
_DEVICES_MAX = 128
_COUNTER_LIMITS_FROM = 35
"""1.35 replaced ResourceSliceMaxSharedCounters (32 sets) with ResourceSliceMaxCounterSets
(8) and ResourceSliceMaxCountersPerCounterSet (32), and limits consumption to
ResourceSliceMaxDeviceCounterConsumptionsPerDevice (2) entries of
ResourceSliceMaxCountersPerDeviceCounterConsumption (32) counters."""
_COUNTER_SETS_MAX_BEFORE = 32
_COUNTER_SETS_MAX = 8
_COUNTERS_PER_SET_MAX = 32
_CONSUMPTIONS_PER_DEVICE_MAX = 2
_FIRST_AVAILABLE_FROM = 33
_PER_DEVICE_NODE_SELECTION_FROM = 33
_DISTINCT_ATTRIBUTE_FROM = 34
_TAINTS_16_FROM = 35
_TAINT_EFFECT_NONE_FROM = 35
"""The informational ``None`` taint effect (k8s.io/api resource/v1 types.go,
DeviceTaintEffectNone) is served from 1.35 on."""
_COUNTERS_IN_OWN_SLICES_FROM = 35
"""KEP-4815 as updated for 1.35 (kubernetes/kubernetes#134189): a slice holds either
``sharedCounters`` or ``devices``, never both."""
_TOLERATIONS_FROM = _on_from("DRADeviceTaints")
_BINDING_CONDITIONS_FROM = _on_from("DRADeviceBindingConditions")
"""Before their gates are on by default the server drops tolerations and binding conditions
on create, so their content is not checked."""
_TAINTS_MAX_BEFORE = 4
_TAINTS_MAX_AFTER = 16
_DECLARATIVE_CONSTRAINT_NAMES_FROM = 37
_ONE_SLASH_NAMES_FROM = int(kubenames.SINGLE_SLASH_RELEASE.split(".")[1])
"""A qualified name (attribute, capacity, matchAttribute, ...) with more than one '/' is
refused from 1.38 (the rule and its source: ``kubenames.SINGLE_SLASH_RELEASE``); v1.37.2
checked nothing at all in such a name."""
_CAPACITY_REQUEST_NAMES_FROM = 38
"""The keys of a request's ``capacity.requests`` are checked as qualified names from 1.38
(#142202, validateCapacityNames in the same file); 1.37.2 did not check them."""
_DEVICE_NODE_SELECTOR_ONE_TERM_FROM = 38
"""A per-device ``nodeSelector`` must have exactly one term from 1.38 (#141213,
validateDeviceNodeSelection); 1.37.2 checked this for the slice-level one only."""
_VERSION_DIGITS_FROM = 38
_VERSION_DIGITS_MAX = 18
"""From 1.38 a version attribute's numbers (and digit-only pre-release identifiers) have
at most 18 digits so that they fit in int64 (#142964, numericIdentifier in the same
file)."""


@dataclass(frozen=True)
class WorkloadKind:
    """A kind that carries a pod spec, and where that spec sits."""

    api_version: str
    pod_spec_path: tuple[str, ...]


WORKLOAD_KINDS: dict[str, WorkloadKind] = {
    "Pod": WorkloadKind("v1", ("spec",)),
    "Deployment": WorkloadKind("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": WorkloadKind("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": WorkloadKind("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": WorkloadKind("apps/v1", ("spec", "template", "spec")),
    "Job": WorkloadKind("batch/v1", ("spec", "template", "spec")),
    "CronJob": WorkloadKind("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
}


@dataclass(frozen=True)
class ApiShape:
    """What one resource.k8s.io version looks like on one Kubernetes release."""

    version: str
    minor: int
    list_type_attributes: bool = False
    """The cluster enables the DRAListTypeAttributes gate."""

    @property
    def list_attribute_fields(self) -> bool:
        """The release has the list value fields (served only with the gate)."""
        return self.minor >= _LIST_ATTRIBUTES_FROM

    @property
    def list_attribute_values(self) -> bool:
        """Attributes may hold lists (``ints``, ``bools``, ``strings``, ``versions``), and
        selectors may call ``includes()``."""
        return self.list_type_attributes and self.list_attribute_fields

    @property
    def consumable_capacity(self) -> bool:
        """DRAConsumableCapacity is on: beta and enabled by default from 1.36
        (k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go); selectors may read
        ``device.allowMultipleAllocations``."""
        return self.minor >= _CONSUMABLE_CAPACITY_FROM

    @property
    def devices_in_basic(self) -> bool:
        """v1beta1 wraps a device's fields in ``basic``; later versions are flat."""
        return self.version == "v1beta1"

    @property
    def requests_in_exactly(self) -> bool:
        """v1beta2 and v1 put a plain request's fields under ``exactly``."""
        return self.version != "v1beta1"

    @property
    def first_available(self) -> bool:
        return self.minor >= _FIRST_AVAILABLE_FROM

    @property
    def per_device_node_selection(self) -> bool:
        return self.minor >= _PER_DEVICE_NODE_SELECTION_FROM

    @property
    def distinct_attribute(self) -> bool:
        return self.minor >= _DISTINCT_ATTRIBUTE_FROM

    @property
    def declarative_constraint_names(self) -> bool:
        """A constraint's ``matchAttribute`` and ``distinctAttribute`` are checked by their
        declared format from 1.37 (beta since 1.37, k8s.io/api v0.37.2 and v0.38.0-beta.0
        resource/v1 types.go ``k8s-resource-fully-qualified-name``; k8s.io/apimachinery
        v0.37.2 pkg/api/validate/strfmt.go: the domain is a DNS subdomain as written),
        where the hand-written rule lower-cased the domain first."""
        return self.minor >= _DECLARATIVE_CONSTRAINT_NAMES_FROM

    @property
    def one_slash_names(self) -> bool:
        """Qualified names with more than one '/' are refused."""
        return self.minor >= _ONE_SLASH_NAMES_FROM

    @property
    def capacity_request_names(self) -> bool:
        """The names in a request's ``capacity.requests`` are checked."""
        return self.minor >= _CAPACITY_REQUEST_NAMES_FROM

    @property
    def device_node_selector_one_term(self) -> bool:
        """A per-device ``nodeSelector`` has exactly one term, like the slice's."""
        return self.minor >= _DEVICE_NODE_SELECTOR_ONE_TERM_FROM

    @property
    def version_digits_max(self) -> int | None:
        """The most digits a number of a version attribute may have (None: no limit)."""
        return _VERSION_DIGITS_MAX if self.minor >= _VERSION_DIGITS_FROM else None

    @property
    def counters_in_own_slices(self) -> bool:
        return self.minor >= _COUNTERS_IN_OWN_SLICES_FROM

    @property
    def taint_effects(self) -> tuple[str, ...]:
        base = ("NoSchedule", "NoExecute")
        return (*base, "None") if self.minor >= _TAINT_EFFECT_NONE_FROM else base

    @property
    def binding_conditions(self) -> bool:
        """A device's binding conditions are kept, and so checked."""
        return self.minor >= _BINDING_CONDITIONS_FROM

    @property
    def tolerations(self) -> bool:
        """A request's tolerations are kept, and so checked."""
        return self.minor >= _TOLERATIONS_FROM

    @property
    def taints_max(self) -> int:
        return _TAINTS_MAX_AFTER if self.minor >= _TAINTS_16_FROM else _TAINTS_MAX_BEFORE

    def devices_max(self, *, taints_or_counters: bool, list_attributes: bool) -> int:
        """Devices one slice may hold, given what its devices use."""
        advanced = (taints_or_counters and self.minor >= _ADVANCED_DEVICES_LIMIT_FROM) or (
            list_attributes and self.minor >= _LIST_ATTRIBUTES_ADVANCED_FROM
        )
        return _ADVANCED_DEVICES_MAX if advanced else _DEVICES_MAX

    @property
    def counter_sets_max(self) -> int:
        limited = self.minor >= _COUNTER_LIMITS_FROM
        return _COUNTER_SETS_MAX if limited else _COUNTER_SETS_MAX_BEFORE

    @property
    def counters_per_set_max(self) -> int | None:
        return _COUNTERS_PER_SET_MAX if self.minor >= _COUNTER_LIMITS_FROM else None

    @property
    def consumptions_per_device_max(self) -> int | None:
        return _CONSUMPTIONS_PER_DEVICE_MAX if self.minor >= _COUNTER_LIMITS_FROM else None


@dataclass(frozen=True)
class Target:
    """The Kubernetes release a run validates against, e.g. ``1.32``."""

    kubernetes_version: str
    list_type_attributes: bool = False
    """The DRAListTypeAttributes gate (alpha, off by default)."""

    @property
    def minor(self) -> int:
        return int(self.kubernetes_version.split(".")[1])

    @property
    def served_resource_versions(self) -> tuple[str, ...]:
        return tuple(
            v
            for v, since in _SERVED_FROM.items()
            if since <= self.minor < _REMOVED_IN.get(v, self.minor + 1)
        )

    def deprecation(self, api_version: str) -> str | None:
        """A warning when this release serves ``api_version`` but deprecates it."""
        group, _, version = api_version.partition("/")
        since = _DEPRECATED_FROM.get(version)
        if group != RESOURCE_GROUP or since is None or self.minor < since:
            return None
        if version not in self.served_resource_versions:
            return None
        return (
            f"apiVersion {api_version} is deprecated since Kubernetes 1.{since} and is no "
            f"longer served from 1.{_REMOVED_IN[version]}; use {RESOURCE_GROUP}/v1"
        )

    def shape(self, api_version: str) -> ApiShape | None:
        """The shape of a resource.k8s.io apiVersion, or None if this release lacks it."""
        group, _, version = api_version.partition("/")
        if group != RESOURCE_GROUP or version not in self.served_resource_versions:
            return None
        return ApiShape(version, self.minor, self.list_type_attributes)

    def unserved_reason(self, api_version: str) -> str:
        group, _, version = api_version.partition("/")
        served = ", ".join(f"{RESOURCE_GROUP}/{v}" for v in self.served_resource_versions)
        if group == RESOURCE_GROUP and version.startswith("v1alpha"):
            why = "an alpha API that dralet does not support"
        elif group == RESOURCE_GROUP and self.minor >= _REMOVED_IN.get(version, self.minor + 1):
            why = f"removed in Kubernetes 1.{_REMOVED_IN[version]}"
        elif group == RESOURCE_GROUP and version in _SERVED_FROM:
            why = f"first served in Kubernetes 1.{_SERVED_FROM[version]}"
        else:
            why = "not a resource.k8s.io version"
        return (
            f"apiVersion {api_version!r} is not served by Kubernetes "
            f"{self.kubernetes_version} ({why}); use {served}"
        )
