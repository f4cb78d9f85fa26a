"""Opaque device configuration (``config[].opaque``) of classes and claims: a valid
driver name and parameters that are a JSON object of at most 10 KiB. ``{}`` is a valid
raw extension: the API server only requires the bytes to be present and a JSON object."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from dralet import kubenames
from dralet.validation import limits
from dralet.validation.diagnostics import Anchor, Finding, Path

__all__ = ["config_findings"]


def config_findings(configs: Any, *, path: Path) -> Iterator[Finding]:
    """Limits and the ``opaque`` entry of each config of a class or claim."""
    if not isinstance(configs, list):
        return
    if len(configs) > limits.CONFIGS_PER_CLAIM_OR_CLASS:
        yield Finding(
            "DRA013",
            path,
            f"{len(configs)} configs: must have at most {limits.CONFIGS_PER_CLAIM_OR_CLASS}",
            Anchor.KEY,
        )
    for index, config in enumerate(configs):
        if not isinstance(config, dict):
            continue
        opaque = config.get("opaque")
        if opaque is None:
            yield Finding(
                "DRA018", (*path, index, "opaque"), "config: `opaque` is required", Anchor.KEY
            )
            continue
        if isinstance(opaque, dict):
            yield from _opaque_findings(opaque, path=(*path, index, "opaque"))


def _opaque_findings(opaque: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    driver = opaque.get("driver")
    if isinstance(driver, str):
        problem = kubenames.driver_name_problem(driver)
        if problem is not None:
            yield Finding("DRA012", (*path, "driver"), f"driver {driver!r}: {problem}")
    if "parameters" not in opaque or opaque["parameters"] is None:
        yield Finding(
            "DRA019", (*path, "parameters"), "opaque: `parameters` is required", Anchor.KEY
        )
        return
    parameters = opaque["parameters"]
    where = (*path, "parameters")
    if not isinstance(parameters, dict):
        yield Finding("DRA019", where, "parameters must be a valid JSON object", Anchor.KEY)
        return
    size = len(json.dumps(parameters, separators=(",", ":")).encode())
    if size > limits.OPAQUE_PARAMETERS_MAX_BYTES:
        yield Finding(
            "DRA019",
            where,
            f"parameters are {size} bytes: must be at most {limits.OPAQUE_PARAMETERS_MAX_BYTES}",
            Anchor.KEY,
        )
