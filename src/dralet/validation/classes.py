"""The API server's rules for a DeviceClass that the schemas miss: selector limits and
CEL, config limits, opaque parameters and the extendedResourceName format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dralet import kubenames
from dralet.validation import expressions, opaque
from dralet.validation.diagnostics import Finding
from dralet.validation.targets import ApiShape

__all__ = ["device_class_findings"]


QUOTA_PREFIX = "requests."
"""A name with this prefix is a quota name, not an extended resource name (k8s.io/kubernetes
v1.37.2 pkg/apis/core/v1/helper/helpers.go IsExtendedResourceName,
DefaultResourceRequestsPrefix)."""


def device_class_findings(data: dict[str, Any], *, shape: ApiShape) -> Iterator[Finding]:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return
    yield from expressions.selector_findings(
        spec.get("selectors"),
        path=("spec", "selectors"),
        lists=shape.list_attribute_values,
        consumable=shape.consumable_capacity,
    )
    yield from opaque.config_findings(spec.get("config"), path=("spec", "config"))
    name = spec.get("extendedResourceName")
    if isinstance(name, str):
        problem = kubenames.extended_resource_name_problem(name)
        if name.startswith(QUOTA_PREFIX):
            problem = f"must not start with {QUOTA_PREFIX!r}, the prefix of quota names"
        if problem is not None:
            yield Finding(
                "DRA012",
                ("spec", "extendedResourceName"),
                f"extendedResourceName {name!r}: {problem}",
            )
