"""The API server's size limits for resource.k8s.io objects, by their upstream names."""

from __future__ import annotations

__all__ = [
    "ATTRIBUTES_AND_CAPACITIES_PER_DEVICE",
    "ATTRIBUTE_VALUES_PER_DEVICE",
    "ATTRIBUTE_VALUE_MAX_LENGTH",
    "CAPACITY_REQUESTS_PER_REQUEST",
    "CONFIGS_PER_CLAIM_OR_CLASS",
    "CONSTRAINTS_PER_CLAIM",
    "COUNTERS_PER_CONSUMPTION",
    "DEVICES_PER_SLICE",
    "FIRST_AVAILABLE_PER_REQUEST",
    "OPAQUE_PARAMETERS_MAX_BYTES",
    "REQUESTS_PER_CLAIM",
    "SELECTORS_PER_REQUEST_OR_CLASS",
]

REQUESTS_PER_CLAIM = 32
"""DeviceRequestsMaxSize; also the limit of a constraint's or config's ``requests``."""
SELECTORS_PER_REQUEST_OR_CLASS = 32
"""DeviceSelectorsMaxSize."""
CONSTRAINTS_PER_CLAIM = 32
"""DeviceConstraintsMaxSize."""
CONFIGS_PER_CLAIM_OR_CLASS = 32
"""DeviceConfigMaxSize."""
FIRST_AVAILABLE_PER_REQUEST = 8
"""FirstAvailableDeviceRequestMaxSize."""
DEVICES_PER_SLICE = 128
"""ResourceSliceMaxDevices."""
ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
"""ResourceSliceMaxAttributesAndCapacitiesPerDevice."""
ATTRIBUTE_VALUE_MAX_LENGTH = 64
"""DeviceAttributeMaxValueLength: string and version attribute values."""
ATTRIBUTE_VALUES_PER_DEVICE = 48
"""ResourceSliceMaxAttributeValuesPerDevice (k8s.io/api v0.37.2 resource/v1 types.go): every
item of a list attribute counts, a scalar counts once."""
CAPACITY_REQUESTS_PER_REQUEST = 32
"""The keys of a request's ``capacity.requests`` (1.38 on)."""
COUNTERS_PER_CONSUMPTION = 32
"""ResourceSliceMaxCountersPerDeviceCounterConsumption (1.35 on)."""
OPAQUE_PARAMETERS_MAX_BYTES = 10 * 1024
"""OpaqueParametersMaxLength."""
