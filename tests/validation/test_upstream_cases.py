"""Cases of the API server's own validation tables, ported as facts: the object each
case builds (as the v1 manifest a user would apply with kubectl) and whether the API
server accepts it. ``dralet validate -k 1.35`` must give the same verdict.

Sources (kubernetes/kubernetes, pkg/apis/resource/validation): TestValidateResourceSlice
and TestValidateResourceSliceUpdate in validation_resourceslice_test.go, TestValidateClass
in validation_deviceclass_test.go. Case names are upstream's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from tests.upstream_agreement import Verdict, record

from dralet.validation import engine
from dralet.validation.diagnostics import Severity
from dralet.validation.documents import Source
from dralet.validation.targets import Target

GOOD = "foo"
BAD = "!@#$%^"
DRIVER = "test.example.com"
MAX_DEVICES = 128
ATTRIBUTES_AND_CAPACITIES = 32
ID_MAX = 32
DOMAIN_MAX = 63
POOL_NAME_MAX = 253
SELECTORS_MAX = 32
CONFIGS_MAX = 32
OPAQUE_MAX = 10 * 1024
VALID = "valid"
INVALID = "invalid"
Object = dict[str, Any]


def _device(index: int) -> Object:
    return {
        "name": f"device-{index}",
        "attributes": {
            "int": {"int": 42},
            "string": {"string": "hello world"},
            "version": {"version": "1.2.3"},
            "bool": {"bool": True},
        },
        "capacity": {"memory": {"value": "1Gi"}},
    }


def slice_(name: str = GOOD, node: str = GOOD, driver: str = DRIVER, devices: int = 1) -> Object:
    """testResourceSlice: a node-local slice with ``devices`` devices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name} if name else {},
        "spec": {
            "nodeName": node,
            "driver": driver,
            "pool": {"name": node, "resourceSliceCount": 1},
            "devices": [_device(i) for i in range(devices)],
        },
    }


def with_(obj: Object, change: Callable[[Object], None]) -> Object:
    changed = copy.deepcopy(obj)
    change(changed)
    return changed


def class_(name: str = GOOD) -> Object:
    """testClass: a DeviceClass with no spec at all."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name} if name else {},
    }


def _set(path: str, value: Any) -> Callable[[Object], None]:
    def change(obj: Object) -> None:
        node = obj
        steps = path.split(".")
        for step in steps[:-1]:
            node = node[int(step)] if isinstance(node, list) else node.setdefault(step, {})
        last = steps[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _drop(path: str) -> Callable[[Object], None]:
    def change(obj: Object) -> None:
        node = obj
        steps = path.split(".")
        for step in steps[:-1]:
            node = node[step]
        del node[steps[-1]]

    return change


def _counter_sets(*sets: Object) -> Callable[[Object], None]:
    def change(obj: Object) -> None:
        del obj["spec"]["devices"]
        obj["spec"]["sharedCounters"] = list(sets)

    return change


def _config(parameters: Any) -> Object:
    return {"opaque": {"driver": GOOD, "parameters": parameters}}


@dataclass(frozen=True)
class Case:
    name: str
    obj: Object
    upstream: str
    """VALID or INVALID: the API server's verdict."""
    deliberate: str = ""
    lists: bool = False
    """Run with DRAListTypeAttributes on (``-k 1.37 --feature-gate ...``); upstream's table
    validates without dropping gated fields, which is what the gate being on means."""
    """Why dralet disagrees on purpose, if it does."""


MEMORY = {"memory": {"value": "1Gi"}}
SLICE = "TestValidateResourceSlice"
CLASS = "TestValidateClass"

SLICE_CASES = [
    Case("good", slice_(devices=MAX_DEVICES), VALID),
    Case("too-large", slice_(devices=MAX_DEVICES + 1), INVALID),
    Case("missing-name", slice_(name=""), INVALID),
    Case("bad-name", slice_(name=BAD), INVALID),
    Case("generate-name", with_(slice_(), _set("metadata.generateName", "prefix-")), VALID),
    Case(
        "uid",
        with_(slice_(), _set("metadata.uid", "ac051fac-2ead-46d9-b8b4-4e0fbeb7455d")),
        VALID,
    ),
    Case("resource-version", with_(slice_(), _set("metadata.resourceVersion", "1")), VALID),
    Case("generation", with_(slice_(), _set("metadata.generation", 100)), VALID),
    Case("finalizers", with_(slice_(), _set("metadata.finalizers", ["example.com/foo"])), VALID),
    Case(
        "good-labels",
        with_(slice_(), _set("metadata.labels", {"apps.kubernetes.io/name": "test"})),
        VALID,
    ),
    Case(
        "bad-labels",
        with_(slice_(), _set("metadata.labels", {"hello-world": "spaces not allowed"})),
        INVALID,
    ),
    Case("good-annotations", with_(slice_(), _set("metadata.annotations", {"foo": "bar"})), VALID),
    Case(
        "bad-annotations",
        with_(slice_(), _set("metadata.annotations", {BAD: "hello world"})),
        INVALID,
    ),
    Case("bad-nodename", slice_(node=BAD), INVALID),
    Case("bad-multi-pool-name", slice_(node=f"{BAD}/{BAD}"), INVALID),
    Case("good-pool-name", with_(slice_(), _set("spec.pool.name", "x" * POOL_NAME_MAX)), VALID),
    Case(
        "bad-pool",
        with_(
            with_(
                with_(slice_(), _set("spec.pool.name", "x/" * (POOL_NAME_MAX // 2) + "xy")),
                _set("spec.pool.resourceSliceCount", 0),
            ),
            _set("spec.pool.generation", -1),
        ),
        INVALID,
    ),
    Case("missing-pool-name", with_(slice_(), _set("spec.pool.name", "")), INVALID),
    Case(
        "bad-empty-node-selector",
        with_(with_(slice_(), _drop("spec.nodeName")), _set("spec.nodeSelector", {})),
        INVALID,
    ),
    Case(
        "bad-node-selection",
        with_(
            slice_(),
            _set(
                "spec.nodeSelector",
                {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["worker"]}
                            ]
                        }
                    ]
                },
            ),
        ),
        INVALID,
    ),
    Case("bad-node-selection-all-nodes", with_(slice_(), _set("spec.allNodes", True)), INVALID),
    Case("empty-node-selection", with_(slice_(), _drop("spec.nodeName")), INVALID),
    Case("bad-drivername", slice_(driver=BAD), INVALID),
    Case(
        "both-shared-counters-and-devices",
        with_(slice_(), _set("spec.sharedCounters", [{"name": "counterset", "counters": MEMORY}])),
        INVALID,
    ),
    Case("bad-devices", with_(slice_(devices=3), _set("spec.devices.1.name", BAD)), INVALID),
    Case(
        "bad-attribute",
        with_(slice_(devices=2), _set("spec.devices.1.attributes", {BAD: {}})),
        INVALID,
    ),
    Case(
        "bad-attribute-two-values",
        with_(
            slice_(devices=2),
            _set("spec.devices.1.attributes", {GOOD: {"string": "x", "version": "1.2.3"}}),
        ),
        INVALID,
    ),
    Case(
        "bad-attribute-version-too-long",
        with_(slice_(devices=2), _set("spec.devices.1.attributes", {GOOD: {"version": "x" * 65}})),
        INVALID,
    ),
    Case(
        "bad-attribute-string-too-long",
        with_(slice_(devices=2), _set("spec.devices.1.attributes", {GOOD: {"string": "x" * 65}})),
        INVALID,
    ),
    Case(
        "good-attribute-names",
        with_(
            slice_(devices=2),
            _set(
                "spec.devices.1.attributes",
                {
                    "x" * ID_MAX: {"string": "y"},
                    "x" * DOMAIN_MAX + "/" + "y" * ID_MAX: {"string": "z"},
                },
            ),
        ),
        VALID,
    ),
    Case(
        "bad-attribute-c-identifier",
        with_(slice_(devices=2), _set("spec.devices.1.attributes", {"." * 33: {"string": "y"}})),
        INVALID,
    ),
    Case(
        "bad-attribute-domain",
        with_(
            slice_(devices=2),
            _set("spec.devices.1.attributes", {"_" * (DOMAIN_MAX + 1) + "/y": {"string": "z"}}),
        ),
        INVALID,
    ),
    Case(
        "bad-key-too-long",
        with_(
            slice_(devices=2),
            _set(
                "spec.devices.1.attributes",
                {"x" * (DOMAIN_MAX + 1) + "/" + "y" * (ID_MAX + 1): {"string": "z"}},
            ),
        ),
        INVALID,
    ),
    Case(
        "bad-attribute-empty-domain-and-c-identifier",
        with_(slice_(devices=2), _set("spec.devices.1.attributes", {"/": {"string": "z"}})),
        INVALID,
    ),
    Case(
        "combined-attributes-capacity-length",
        with_(
            slice_(),
            _set(
                "spec.devices.0",
                {
                    "name": "device-0",
                    "attributes": {
                        f"attr_{i}": {"string": "x"} for i in range(ATTRIBUTES_AND_CAPACITIES)
                    },
                    "capacity": {"cap": {"value": "1Gi"}},
                },
            ),
        ),
        INVALID,
    ),
    Case(
        "bad-node-selector-in-basicdevice",
        with_(
            with_(
                with_(slice_(), _drop("spec.nodeName")),
                _set("spec.perDeviceNodeSelection", True),
            ),
            lambda o: o["spec"]["devices"][0].update(nodeName="worker", allNodes=True),
        ),
        INVALID,
    ),
    Case(
        "missing-name-shared-counters",
        with_(slice_(), _counter_sets({"counters": MEMORY})),
        INVALID,
    ),
    Case(
        "bad-name-shared-counters",
        with_(slice_(), _counter_sets({"name": BAD, "counters": MEMORY})),
        INVALID,
    ),
    Case(
        "missing-counter-shared-counters",
        with_(slice_(), _counter_sets({"name": GOOD})),
        INVALID,
    ),
    Case(
        "bad-countername-shared-counters",
        with_(slice_(), _counter_sets({"name": GOOD, "counters": {BAD: {"value": "1Gi"}}})),
        INVALID,
    ),
    Case(
        "duplicate-shared-counters",
        with_(
            slice_(),
            _counter_sets({"name": GOOD, "counters": MEMORY}, {"name": GOOD, "counters": MEMORY}),
        ),
        INVALID,
    ),
    Case(
        "bad-name-counterset-consumes-counter",
        with_(
            slice_(),
            _set("spec.devices.0.consumesCounters", [{"counterSet": BAD, "counters": MEMORY}]),
        ),
        INVALID,
    ),
    Case(
        "duplicate-counterset-consumes-counter",
        with_(
            slice_(),
            _set(
                "spec.devices.0.consumesCounters",
                [
                    {"counterSet": GOOD, "counters": MEMORY},
                    {"counterSet": GOOD, "counters": MEMORY},
                ],
            ),
        ),
        INVALID,
    ),
    Case(
        "missing-counter-consumes-counter",
        with_(slice_(), _set("spec.devices.0.consumesCounters", [{"counterSet": "counterset-0"}])),
        INVALID,
    ),
    Case(
        # TestValidateResourceSliceUpdate: the same rule holds on create.
        "invalid-new-effect-in-new-device",
        with_(
            slice_(),
            _set(
                "spec.devices.0.taints",
                [
                    {"key": "unhealthy-power", "effect": "NoExecute"},
                    {"key": "unhealthy-mem", "effect": "some-other-effect"},
                ],
            ),
        ),
        INVALID,
    ),
    Case(
        "invalid-update-to-invalid-nodeselector-label-value",
        with_(
            with_(slice_(), _drop("spec.nodeName")),
            _set(
                "spec.nodeSelector",
                {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["-1"]}]}
                    ]
                },
            ),
        ),
        INVALID,
    ),
]


def _selectors(*expressions: str) -> list[Object]:
    return [{"cel": {"expression": e}} for e in expressions]


CLASS_CASES = [
    Case("good-class", class_(), VALID),
    Case("missing-name", class_(""), INVALID),
    Case("bad-name", class_(BAD), INVALID),
    Case("generate-name", with_(class_(), _set("metadata.generateName", "pvc-")), VALID),
    Case(
        "owner-references",
        with_(
            class_(),
            _set(
                "metadata.ownerReferences",
                [
                    {
                        "apiVersion": "v1",
                        "kind": "pod",
                        "name": "foo",
                        "uid": "ac051fac-2ead-46d9-b8b4-4e0fbeb7455d",
                    }
                ],
            ),
        ),
        VALID,
    ),
    Case(
        "good-labels",
        with_(class_(), _set("metadata.labels", {"apps.kubernetes.io/name": "test"})),
        VALID,
    ),
    Case(
        "bad-labels",
        with_(class_(), _set("metadata.labels", {"hello-world": "spaces not allowed"})),
        INVALID,
    ),
    Case("good-annotations", with_(class_(), _set("metadata.annotations", {"foo": "bar"})), VALID),
    Case(
        "bad-annotations",
        with_(class_(), _set("metadata.annotations", {BAD: "hello world"})),
        INVALID,
    ),
    Case(
        "good-extended-resource-name",
        with_(class_(), _set("spec.extendedResourceName", "example.com/gpu")),
        VALID,
    ),
    Case(
        "bad-extended-resource-name",
        with_(class_(), _set("spec.extendedResourceName", "example.com")),
        INVALID,
    ),
    Case(
        "selectors-missing-cel",
        with_(class_(), _set("spec.selectors", [*_selectors("true"), {}])),
        INVALID,
    ),
    Case(
        "selectors-undeclared-reference",
        with_(class_(), _set("spec.selectors", _selectors("true", "noSuchVar"))),
        INVALID,
    ),
    Case(
        "selectors-at-the-limit",
        with_(class_(), _set("spec.selectors", _selectors(*["true"] * SELECTORS_MAX))),
        VALID,
    ),
    Case(
        "too-many-selectors",
        with_(class_(), _set("spec.selectors", _selectors(*["true"] * (SELECTORS_MAX + 1)))),
        INVALID,
    ),
    Case(
        "configuration-both-opaque-fields-missing",
        with_(class_(), _set("spec.config", [{"opaque": {}}])),
        INVALID,
    ),
    Case(
        "configuration-parameters-not-an-object",
        with_(class_(), _set("spec.config", [_config("hello-world")])),
        INVALID,
    ),
    Case(
        "configuration-parameters-null",
        with_(class_(), _set("spec.config", [_config(None)])),
        INVALID,
    ),
    Case("configuration-empty", with_(class_(), _set("spec.config", [{}])), INVALID),
    Case(
        # Upstream counts the raw bytes `{"str": "..."}`; kubectl sends YAML as compact JSON
        # (`{"str":"..."}`), so the port puts the limit where the compact form reaches it.
        "configuration-parameters-at-the-limit",
        with_(class_(), _set("spec.config", [_config({"str": "x" * (OPAQUE_MAX - 10)})])),
        VALID,
    ),
    Case(
        "configuration-parameters-too-large",
        with_(class_(), _set("spec.config", [_config({"str": "x" * (OPAQUE_MAX - 9)})])),
        INVALID,
    ),
    Case(
        "configuration-at-the-limit",
        with_(class_(), _set("spec.config", [_config({"foo": 42})] * CONFIGS_MAX)),
        VALID,
    ),
    Case(
        "too-many-configs",
        with_(class_(), _set("spec.config", [_config({"foo": 42})] * (CONFIGS_MAX + 1))),
        INVALID,
    ),
]

ADVANCED_DEVICES_MAX = 64
"""ResourceSliceMaxDevicesWithAdvancedFeatures: list attributes count as advanced (1.36)."""
ATTRIBUTE_VALUES_MAX = 48


def _list_attribute(name: str, value: Object, *, devices: int) -> Callable[[Object], None]:
    """Give the first ``devices`` devices the list attribute ``name``."""

    def change(obj: Object) -> None:
        for device in obj["spec"]["devices"][:devices]:
            device["attributes"][name] = copy.deepcopy(value)

    return change


def _only_attributes(index: int, attributes: Object) -> Callable[[Object], None]:
    def change(obj: Object) -> None:
        device = obj["spec"]["devices"][index]
        device["attributes"] = attributes
        device.pop("capacity", None)

    return change


def _values_up_to(total: int) -> Object:
    """maxStringAttributeValuesInList: 31 string-list attributes holding ``total`` values."""
    keys = ATTRIBUTES_AND_CAPACITIES - 1
    first = total - (ATTRIBUTES_AND_CAPACITIES - 2)
    return {f"list_attr_{i}": {"strings": ["x"] * (first if i == 0 else 1)} for i in range(keys)}


def _attribute_values_slice() -> Object:
    extras: list[Object | None] = [
        None,
        {"int": 1},
        {"bool": True},
        {"string": "x"},
        {"version": "1.0.0"},
        {"ints": [1]},
        {"bools": [True]},
        {"strings": ["extra"]},
        {"versions": ["1.0.0"]},
    ]
    obj = slice_(devices=14)
    for index, extra in enumerate(extras):
        attributes = _values_up_to(ATTRIBUTE_VALUES_MAX)
        if extra is not None:
            attributes["extra_attr"] = extra
        _only_attributes(index, attributes)(obj)
    mixed = {
        "strings": ["x"] * (ATTRIBUTE_VALUES_MAX - 2),
        "ints": [1],
        "bools": [True],
        "versions": ["1.0.0"],
    }
    _only_attributes(9, {"mixed_list_attrs": mixed})(obj)
    for index, extra in enumerate(
        (
            {"bools": [True, False]},
            {"ints": [1, 2]},
            {"strings": ["a", "b"]},
            {"versions": ["1.0.0", "1.0.1"]},
        ),
        start=10,
    ):
        attributes = _values_up_to(ATTRIBUTE_VALUES_MAX - 1)
        attributes["extra_attr"] = extra
        _only_attributes(index, attributes)(obj)
    return obj


def _bad_list_attribute_slice() -> Object:
    obj = slice_(devices=8)
    too_long = "x" * 65
    bad = [
        {"ints": [1], "bools": [True]},
        {"ints": [1], "bools": [True], "strings": []},
        {"strings": [too_long]},
        {"versions": [too_long]},
        {"bools": []},
        {"ints": []},
        {"strings": []},
        {"versions": []},
    ]
    for index, value in enumerate(bad):
        _set(f"spec.devices.{index}.attributes", {GOOD: value})(obj)
    return obj


def _good_list_attribute_slice() -> Object:
    obj = slice_(devices=4)
    values = [{"bools": [True]}, {"ints": [1]}, {"strings": ["x"]}, {"versions": ["1.2.3"]}]
    for index, value in enumerate(values):
        _set(f"spec.devices.{index}.attributes", {GOOD: value})(obj)
    return obj


LIST_VALUES = {
    "int": {"ints": [1, 2, 3]},
    "bool": {"bools": [True, False, True]},
    "string": {"strings": ["a", "b", "c"]},
    "version": {"versions": ["1.0.0", "2.0.0", "3.0.0"]},
}
LIST_SLICE_CASES = [
    Case("good-list-attribute", _good_list_attribute_slice(), VALID, lists=True),
    Case("bad-list-attribute", _bad_list_attribute_slice(), INVALID, lists=True),
    *(
        Case(
            f"max-devices-with-list-of-{kind}-attributes",
            with_(
                slice_(devices=ADVANCED_DEVICES_MAX),
                _list_attribute(f"{kind}s", value, devices=ADVANCED_DEVICES_MAX),
            ),
            VALID,
            lists=True,
        )
        for kind, value in LIST_VALUES.items()
    ),
    *(
        Case(
            f"too-many-devices-with-list-of-{kind}-attributes",
            with_(
                slice_(devices=ADVANCED_DEVICES_MAX + 1),
                _list_attribute(f"{kind}s", value, devices=1),
            ),
            INVALID,
            lists=True,
        )
        for kind, value in LIST_VALUES.items()
    ),
    Case("max-attribute-values-with-list", _attribute_values_slice(), INVALID, lists=True),
    Case(
        "max-attribute-values-with-list/device-0-alone",
        with_(slice_(), _only_attributes(0, _values_up_to(ATTRIBUTE_VALUES_MAX))),
        VALID,
        lists=True,
    ),
]
SLICE_CASES += LIST_SLICE_CASES

TABLES = [(SLICE, case) for case in SLICE_CASES] + [(CLASS, case) for case in CLASS_CASES]


def _verdict(obj: Object, *, lists: bool = False) -> tuple[str, list[str]]:
    text = yaml.safe_dump(obj, sort_keys=False)
    target = Target("1.37", list_type_attributes=True) if lists else Target("1.35")
    report = engine.validate_sources([Source("case.yaml", text)], target=target)
    errors = [f"{d.rule} {d.message}" for d in report.diagnostics if d.severity is Severity.ERROR]
    return (INVALID if errors else VALID), errors


@pytest.mark.parametrize(("table", "case"), TABLES, ids=[f"{t}/{c.name}" for t, c in TABLES])
def test_upstream_case(table: str, case: Case) -> None:
    ours, errors = _verdict(case.obj, lists=case.lists)
    agrees = ours == case.upstream
    record(Verdict(f"validation {table}", case.name, agrees, case.deliberate))
    if case.deliberate:
        assert not agrees, f"now agrees; drop the deliberate note: {case.deliberate}"
    else:
        assert agrees, f"upstream says {case.upstream}, dralet says {ours}: {json.dumps(errors)}"


def test_every_case_name_is_unique() -> None:
    for cases in (SLICE_CASES, CLASS_CASES):
        assert len({c.name for c in cases}) == len(cases)
