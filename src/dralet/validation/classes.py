"""The API server's rules for a DeviceClass that the schemas miss: selector limits and
CEL, config limits and opaque parameters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dralet.validation import expressions, opaque
from dralet.validation.diagnostics import Finding

__all__ = ["device_class_findings"]


def device_class_findings(data: dict[str, Any]) -> Iterator[Finding]:
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return
    yield from expressions.selector_findings(spec.get("selectors"), path=("spec", "selectors"))
    yield from opaque.config_findings(spec.get("config"), path=("spec", "config"))
