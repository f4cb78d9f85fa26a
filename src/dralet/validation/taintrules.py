"""DeviceTaintRule selectors that do something else than they seem to: a rule without
``spec.deviceSelector`` taints no device, one with an empty selector taints every device
of every driver in the cluster.

Facts: k8s.io/kubernetes v1.38.0-beta.0 pkg/registry/resource/devicetaintrule/strategy.go
(warningsForDeviceTaintRule: the API server warns about the empty selector, kubectl shows
it, kubernetes/kubernetes#141831) and k8s.io/dynamic-resource-allocation v0.37.2 and
v0.38.0-beta.0 resourceslice/tracker/tracker.go (a missing selector matches no device; the
fix, kubernetes/kubernetes#141648, is in 1.37.1 and 1.38: 1.37.0 matched every device).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dralet.validation.diagnostics import Anchor, Finding

__all__ = ["RULE", "rule_findings"]

RULE = "DRA111"
_NARROWING = ("driver", "pool", "device")
"""The selector fields that narrow a rule to some devices."""


def rule_findings(data: dict[str, Any]) -> Iterator[Finding]:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return
    selector = spec.get("deviceSelector")
    if selector is None:
        yield Finding(
            RULE,
            ("spec",),
            "spec.deviceSelector is not set: the rule matches no device (Kubernetes 1.37.0 "
            "matched every device); set driver, pool or device to say which devices to taint",
            Anchor.KEY,
        )
    elif isinstance(selector, dict) and not any(selector.get(f) for f in _NARROWING):
        yield Finding(
            RULE,
            ("spec", "deviceSelector"),
            "spec.deviceSelector: an empty selector matches every device from every driver "
            "in the cluster",
            Anchor.KEY,
        )
