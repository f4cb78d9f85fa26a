"""The API server's rules for device taints (in slices and DeviceTaintRules), tolerations
(in claim requests and subrequests) and binding conditions (on slice devices).

Facts: k8s.io/kubernetes v1.37.2 and v1.38.0-beta.0
pkg/apis/resource/validation/validation.go (validateDeviceTaint, validateDeviceToleration,
validateDeviceTaintSelector, validateDeviceBindingParameters) and k8s.io/api v0.37.2
resource/v1 types.go (BindingConditionsMaxSize, BindingFailureConditionsMaxSize).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dralet import kubenames
from dralet.validation.diagnostics import Anchor, Finding, Path

__all__ = [
    "BINDING_CONDITIONS_MAX",
    "binding_condition_findings",
    "taint_findings",
    "taint_rule_findings",
    "toleration_findings",
]

RULE = "DRA024"
TOLERATION_OPERATORS = ("Equal", "Exists")
_EXISTS = "Exists"
_EQUAL = "Equal"
BINDING_CONDITIONS_MAX = 4
"""BindingConditionsMaxSize and BindingFailureConditionsMaxSize, each."""


def _supported(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def toleration_findings(
    tolerations: Any, *, effects: tuple[str, ...], path: Path
) -> Iterator[Finding]:
    """Each toleration of a request: a label-key ``key`` when set, an operator (Equal or
    Exists; the server defaults it to Equal), no value with Exists, a label value with
    Equal, an effect the release knows when set."""
    if not isinstance(tolerations, list):
        return
    for index, toleration in enumerate(tolerations):
        if not isinstance(toleration, dict):
            continue
        where = (*path, index)
        key = toleration.get("key")
        if isinstance(key, str) and key:
            problem = kubenames.label_key_problem(key)
            if problem is not None:
                yield Finding(RULE, (*where, "key"), f"toleration key {key!r}: {problem}")
        operator = toleration.get("operator") or _EQUAL  # defaulted by the server
        value = toleration.get("value")
        if not isinstance(operator, str):
            pass
        elif operator == _EXISTS:
            if isinstance(value, str) and value:
                yield Finding(
                    RULE, (*where, "value"), f"toleration value {value!r}: must be empty for Exists"
                )
        elif operator == _EQUAL:
            if isinstance(value, str):
                problem = kubenames.label_value_problem(value)
                if problem is not None:
                    yield Finding(RULE, (*where, "value"), f"toleration value {value!r}: {problem}")
        else:
            yield Finding(
                RULE,
                (*where, "operator"),
                f"toleration operator {operator!r}: supported values: "
                f"{_supported(TOLERATION_OPERATORS)}",
            )
        effect = toleration.get("effect")
        if isinstance(effect, str) and effect and effect not in effects:
            yield Finding(
                RULE,
                (*where, "effect"),
                f"toleration effect {effect!r}: supported values: {_supported(effects)}",
            )


def taint_findings(taint: Any, *, effects: tuple[str, ...], path: Path) -> Iterator[Finding]:
    """A taint: a label-key ``key`` (required), a label value, a required known effect (a
    missing key or effect is the schema's to report)."""
    if not isinstance(taint, dict):
        return
    key = taint.get("key")
    if isinstance(key, str):
        problem = kubenames.label_key_problem(key) if key else "a taint key is required"
        if problem is not None:
            yield Finding(RULE, (*path, "key"), f"taint key {key!r}: {problem}")
    value = taint.get("value")
    if isinstance(value, str):
        problem = kubenames.label_value_problem(value)
        if problem is not None:
            yield Finding(RULE, (*path, "value"), f"taint value {value!r}: {problem}")
    effect = taint.get("effect")
    if effect == "":
        yield Finding(RULE, (*path, "effect"), "a taint effect is required")
    elif isinstance(effect, str) and effect not in effects:
        yield Finding(
            RULE,
            (*path, "effect"),
            f"taint effect {effect!r}: supported values: {_supported(effects)}",
        )


def taint_rule_findings(data: dict[str, Any], *, effects: tuple[str, ...]) -> Iterator[Finding]:
    """A DeviceTaintRule's name (a DNS subdomain), its selector's driver, pool and device
    names, and its taint."""
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(name, str) and name:
        problem = kubenames.dns_subdomain_problem(name)
        if problem is not None:
            yield Finding("DRA012", ("metadata", "name"), f"name {name!r}: {problem}")
    spec = data.get("spec")
    if spec is None:  # decoded as an empty spec: its taint has neither key nor effect
        for field in ("key", "effect"):
            yield Finding(
                RULE,
                ("spec", "taint", field),
                f"spec.taint: a taint {field} is required",
                Anchor.KEY,
            )
        return
    if not isinstance(spec, dict):
        return
    selector = spec.get("deviceSelector")
    if isinstance(selector, dict):
        checks = (
            ("driver", kubenames.driver_name_problem),
            ("pool", kubenames.pool_name_problem),
            ("device", kubenames.dns_label_problem),
        )
        for field, check in checks:
            value = selector.get(field)
            if isinstance(value, str):
                problem = check(value)
                if problem is not None:
                    yield Finding(
                        "DRA012",
                        ("spec", "deviceSelector", field),
                        f"{field} {value!r}: {problem}",
                    )
    yield from taint_findings(spec.get("taint"), effects=effects, path=("spec", "taint"))


def binding_condition_findings(device: dict[str, Any], *, path: Path) -> Iterator[Finding]:
    """A device's binding conditions and binding failure conditions: label-key names, at
    most four each, no duplicates, no overlap, and one list only with the other."""
    conditions = device.get("bindingConditions")
    failures = device.get("bindingFailureConditions")
    lists: dict[str, list[Any]] = {}
    for field, value in (
        ("bindingConditions", conditions),
        ("bindingFailureConditions", failures),
    ):
        items = value if isinstance(value, list) else []
        lists[field] = items
        if len(items) > BINDING_CONDITIONS_MAX:
            yield Finding(
                "DRA013",
                (*path, field),
                f"{len(items)} {field}: must have at most {BINDING_CONDITIONS_MAX}",
                Anchor.KEY,
            )
        seen: set[str] = set()
        for index, item in enumerate(items):
            if not isinstance(item, str):
                continue
            problem = kubenames.label_key_problem(item)
            if problem is not None:
                yield Finding("DRA012", (*path, field, index), f"{field} {item!r}: {problem}")
            if item in seen:
                yield Finding("DRA016", (*path, field, index), f"duplicate {field} {item!r}")
            seen.add(item)
    wanted = {c for c in lists["bindingConditions"] if isinstance(c, str)}
    for index, item in enumerate(lists["bindingFailureConditions"]):
        if isinstance(item, str) and item in wanted:
            yield Finding(
                "DRA018",
                (*path, "bindingFailureConditions", index),
                f"{item!r} is in both bindingConditions and bindingFailureConditions",
            )
    if lists["bindingFailureConditions"] and not lists["bindingConditions"]:
        yield Finding(
            "DRA018",
            (*path, "bindingConditions"),
            "bindingConditions are required to use bindingFailureConditions",
            Anchor.KEY,
        )
    if lists["bindingConditions"] and not lists["bindingFailureConditions"]:
        yield Finding(
            "DRA018",
            (*path, "bindingFailureConditions"),
            "bindingFailureConditions are required to use bindingConditions",
            Anchor.KEY,
        )
