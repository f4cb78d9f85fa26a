"""The CEL environment of DRA device selectors, behind a small engine interface.

Owns compiling selector expressions (once per expression string), evaluating them
against one device, and the Kubernetes CEL libraries a selector may use:
``device.driver``, ``device.attributes[domain].name``, ``device.capacity[domain].name``,
``quantity()``/``isQuantity()`` and ``semver()``/``isSemver()`` with their members,
the strings (v2), optional and bindings extensions, and the Kubernetes lists,
sets and regex libraries. An unknown domain reads as an empty map; a missing attribute
inside a known domain is a runtime error, as in the scheduler.

Only this module imports the CEL runtime (cel-expr-python), so another runtime can be
put behind ``CelEngine``, ``CompiledSelector`` and ``DeviceView`` without touching the
allocator. Used by the allocator, ``dralet simulate`` and ``dralet validate``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pool

from dralet.allocation import cel_syntax, quantity, semver
from dralet.protocol.proto import cel_types_pb2

__all__ = [
    "LIST_KINDS",
    "MAX_EXPRESSION_LENGTH",
    "SCALAR_KINDS",
    "CelCompileError",
    "CelEngine",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceView",
    "device_view",
]

MAX_EXPRESSION_LENGTH = 10 * 1024
"""Longest selector expression Kubernetes accepts (CELSelectorExpressionMaxLength)."""
STRINGS_EXTENSION_VERSION = 2
"""Kubernetes enables ext.Strings at version 2 for 1.29 and later."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_QUANTITY_TYPE = cel.Type("dralet.cel.v1.Quantity")
_SEMVER_TYPE = cel.Type("dralet.cel.v1.Semver")
_LIST = cel.Type.List(cel.Type.DYN)
_STRING_LIST = cel.Type.List(cel.Type.STRING)
_ACCEPTED_RESULT_TYPES = (cel.Type.BOOL, cel.Type.DYN)
_COMPILE_ERROR = re.compile(r"ERROR: <input>:(?P<line>\d+):(?P<column>\d+): (?P<message>[^\n]*)")
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_MISSING_KEY = re.compile(r'^Key not found in map : "?(?P<key>.*?)"?$')


class CelCompileError(Exception):
    """An expression does not compile; ``column`` is a 0-based offset into it, if known."""

    def __init__(self, message: str, *, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class CelRuntimeError(Exception):
    """Evaluating an expression against a device failed (missing key, bad type, ...)."""


@dataclass(frozen=True, eq=False)
class DeviceView:
    """One device as selectors see it; build it once with ``device_view`` and reuse it."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    """domain -> attribute id -> CEL value (int, bool, str, or a Semver message)."""
    capacity: Mapping[str, Mapping[str, Any]]
    """domain -> capacity name -> Quantity message."""
    allow_multiple_allocations: bool = False
    conversion_error: str | None = None
    """Why an attribute or capacity could not be turned into a CEL value, if one could not."""
    fingerprint: Hashable = None
    """Equal for devices a selector cannot tell apart (same driver, attributes and
    capacity), so one selector result serves them all."""
    _activation: list[cel.Activation] = field(default_factory=list, repr=False)

    def activation(self) -> cel.Activation:
        """The runtime's pre-converted form of this device, built on first use."""
        if not self._activation:
            data = {
                "driver": self.driver,
                _MULTIPLE_ALLOCATIONS: self.allow_multiple_allocations,
                "attributes": self.attributes,
                "capacity": self.capacity,
            }
            self._activation.append(_environment().Activation({"device": data}))
        return self._activation[0]


def _split_name(name: str, *, driver: str) -> tuple[str, str]:
    domain, slash, identifier = name.partition("/")
    return (domain, identifier) if slash else (driver, name)


SCALAR_KINDS = ("int", "bool", "string", "version")
"""The value fields of a device attribute, in the order upstream reads them."""
LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
"""List-type values (DRAListTypeAttributes) and the kind of their items: CEL sees a list
of that kind's values, whether or not the gate is on (k8s.io/dynamic-resource-allocation
v0.37.2 cel/compile.go getAttributeValue)."""


def _scalar_value(kind: str, value: Any) -> Any:
    if kind == "version":
        text = str(value)
        semver.parse_version(text)
        return cel_types_pb2.Semver(text=text)
    if kind == "int":
        return int(value)
    if kind == "bool":
        return bool(value)
    return str(value)


def _attribute_value(name: str, value: Mapping[str, Any]) -> Any:
    present = [key for key in (*SCALAR_KINDS, *LIST_KINDS) if value.get(key) is not None]
    if len(present) != 1:
        raise ValueError(f"attribute {name}: unsupported attribute value")
    kind = present[0]
    if kind in LIST_KINDS:
        items = value[kind]
        if not isinstance(items, list):
            raise ValueError(f"attribute {name}: {kind} is not a list")
        return [_scalar_value(LIST_KINDS[kind], item) for item in items]
    return _scalar_value(kind, value[kind])


def _capacity_value(name: str, value: Any) -> cel_types_pb2.Quantity:
    text = value.get("value") if isinstance(value, Mapping) else value
    if text is None:
        raise ValueError(f"capacity {name}: no value")
    try:
        quantity.parse_quantity(str(text))
    except quantity.QuantityError as error:
        raise ValueError(f"capacity {name}: {error}") from None
    return cel_types_pb2.Quantity(text=str(text))


def device_view(
    *,
    driver: str,
    attributes: Mapping[str, Any],
    capacity: Mapping[str, Any],
    allow_multiple_allocations: bool = False,
) -> DeviceView:
    """A device in selector form, from API JSON attributes and capacity.

    ``attributes`` is e.g. ``{"model": {"string": "A100"}, "gpu.example.com/index":
    {"int": 0}}`` and ``capacity`` ``{"memory": {"value": "80Gi"}}``; names without a
    domain belong to the driver's domain. A value that cannot be converted does not
    raise here: every evaluation against the device fails with its reason instead.
    """
    fingerprint = (driver, allow_multiple_allocations, _frozen(attributes), _frozen(capacity))
    known = _VIEWS.get(fingerprint)
    if known is not None:
        return known
    by_domain: dict[str, dict[str, Any]] = {driver: {}}
    capacity_by_domain: dict[str, dict[str, Any]] = {driver: {}}
    problem: str | None = None
    for name, value in attributes.items():
        domain, identifier = _split_name(name, driver=driver)
        try:
            by_domain.setdefault(domain, {})[identifier] = _attribute_value(name, value)
        except ValueError as error:
            problem = problem or str(error)
    for name, value in capacity.items():
        domain, identifier = _split_name(name, driver=driver)
        try:
            capacity_by_domain.setdefault(domain, {})[identifier] = _capacity_value(name, value)
        except ValueError as error:
            problem = problem or str(error)
    view = DeviceView(
        driver=driver,
        attributes=by_domain,
        capacity=capacity_by_domain,
        allow_multiple_allocations=allow_multiple_allocations,
        conversion_error=problem,
        fingerprint=fingerprint,
    )
    if len(_VIEWS) >= _VIEWS_KEPT:
        _VIEWS.clear()
    _VIEWS[fingerprint] = view
    return view


_VIEWS: dict[Hashable, DeviceView] = {}
"""Views by content: identical devices (a node's eight GPUs of one model) share one view,
converted once for the CEL runtime."""
_VIEWS_KEPT = 16_384


def _frozen(value: Mapping[str, Any]) -> str:
    """A canonical text of API JSON (keys sorted): equal for equal content."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


# --- Kubernetes quantity and semver libraries ------------------------------------------


def _value_of(q: cel_types_pb2.Quantity) -> Fraction:
    return quantity.parse_quantity(q.text)


def _make_quantity(text: str) -> cel_types_pb2.Quantity:
    quantity.parse_quantity(text)
    return cel_types_pb2.Quantity(text=text)


def _is_quantity(text: str) -> bool:
    try:
        quantity.parse_quantity(text)
    except quantity.QuantityError:
        return False
    return True


def _make_semver(text: str) -> cel_types_pb2.Semver:
    semver.parse_version(text)
    return cel_types_pb2.Semver(text=text)


def _is_semver(text: str) -> bool:
    try:
        semver.parse_version(text)
    except semver.SemverError:
        return False
    return True


def _make_semver_normalized(text: str, normalize: bool) -> cel_types_pb2.Semver:
    return _make_semver(semver.normalize(text) if normalize else text)


def _is_semver_normalized(text: str, normalize: bool) -> bool:
    try:
        return _is_semver(semver.normalize(text) if normalize else text)
    except semver.SemverError:
        return False


def _compare(left: Any, right: Any) -> int:
    """compareTo for both message types: the runtime dispatches both overloads here."""
    if isinstance(left, cel_types_pb2.Semver) and isinstance(right, cel_types_pb2.Semver):
        return semver.compare_versions(
            semver.parse_version(left.text), semver.parse_version(right.text)
        )
    if isinstance(left, cel_types_pb2.Quantity) and isinstance(right, cel_types_pb2.Quantity):
        a, b = _value_of(left), _value_of(right)
        return (a > b) - (a < b)
    raise TypeError(f"cannot compare {type(left).__name__} with {type(right).__name__}")


def _quantity_plus(left: cel_types_pb2.Quantity, right: Any, *, sign: int) -> Any:
    other = _value_of(right) if isinstance(right, cel_types_pb2.Quantity) else Fraction(right)
    return cel_types_pb2.Quantity(text=quantity.format_quantity(_value_of(left) + sign * other))


def _sign(q: cel_types_pb2.Quantity) -> int:
    value = _value_of(q)
    return (value > 0) - (value < 0)


def _as_integer(q: cel_types_pb2.Quantity) -> int:
    value = _value_of(q)
    if value.denominator != 1 or not _INT64_MIN <= value.numerator <= _INT64_MAX:
        raise ValueError(f"cannot convert value to integer: {q.text}")
    return value.numerator


def _member(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any]) -> Any:
    overload_id = "_".join([name, *(p.name().replace(".", "_") for p in params)])
    return cel.Overload(overload_id, result, params, is_member=True, impl=impl)


def _global(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any]) -> Any:
    overload_id = "_".join(["global", name, *(p.name().replace(".", "_") for p in params)])
    return cel.Overload(overload_id, result, params, impl=impl)


def _comparison_decls() -> list[cel.FunctionDecl]:
    """isGreaterThan/isLessThan/compareTo on Quantity and Semver.

    The runtime keys implementations by "message" kind, so each name gets its Python
    implementation on the Quantity overload only; the Semver overload is declared for the
    type checker and lands on the same implementation, which branches on the class.
    """
    q, s = _QUANTITY_TYPE, _SEMVER_TYPE
    greater = lambda a, b: _compare(a, b) > 0  # noqa: E731 - one-line CEL bindings
    less = lambda a, b: _compare(a, b) < 0  # noqa: E731
    decls = []
    for name, result, impl in (
        ("isGreaterThan", cel.Type.BOOL, greater),
        ("isLessThan", cel.Type.BOOL, less),
        ("compareTo", cel.Type.INT, _compare),
    ):
        quantity_overload = _member(name, result, [q, q], impl)
        semver_overload = cel.Overload(f"{name}_semver_semver", result, [s, s], is_member=True)
        decls.append(cel.FunctionDecl(name, [quantity_overload, semver_overload]))
    return decls


def _quantity_decls() -> list[cel.FunctionDecl]:
    q, integer, boolean = _QUANTITY_TYPE, cel.Type.INT, cel.Type.BOOL
    return [
        cel.FunctionDecl("quantity", [_global("quantity", q, [cel.Type.STRING], _make_quantity)]),
        cel.FunctionDecl(
            "isQuantity", [_global("isQuantity", boolean, [cel.Type.STRING], _is_quantity)]
        ),
        cel.FunctionDecl("sign", [_member("sign", integer, [q], _sign)]),
        cel.FunctionDecl(
            "add",
            [
                _member("add", q, [q, q], lambda a, b: _quantity_plus(a, b, sign=1)),
                _member("add", q, [q, integer], lambda a, b: _quantity_plus(a, b, sign=1)),
            ],
        ),
        cel.FunctionDecl(
            "sub",
            [
                _member("sub", q, [q, q], lambda a, b: _quantity_plus(a, b, sign=-1)),
                _member("sub", q, [q, integer], lambda a, b: _quantity_plus(a, b, sign=-1)),
            ],
        ),
        cel.FunctionDecl(
            "isInteger",
            [_member("isInteger", boolean, [q], lambda a: _value_of(a).denominator == 1)],
        ),
        cel.FunctionDecl("asInteger", [_member("asInteger", integer, [q], _as_integer)]),
        cel.FunctionDecl(
            "asApproximateFloat",
            [_member("asApproximateFloat", cel.Type.DOUBLE, [q], lambda a: float(_value_of(a)))],
        ),
    ]


def _semver_decls() -> list[cel.FunctionDecl]:
    s, integer = _SEMVER_TYPE, cel.Type.INT
    return [
        cel.FunctionDecl(
            "semver",
            [
                _global("semver", s, [cel.Type.STRING], _make_semver),
                _global("semver", s, [cel.Type.STRING, cel.Type.BOOL], _make_semver_normalized),
            ],
        ),
        cel.FunctionDecl(
            "isSemver",
            [
                _global("isSemver", cel.Type.BOOL, [cel.Type.STRING], _is_semver),
                _global(
                    "isSemver",
                    cel.Type.BOOL,
                    [cel.Type.STRING, cel.Type.BOOL],
                    _is_semver_normalized,
                ),
            ],
        ),
        cel.FunctionDecl(
            "major", [_member("major", integer, [s], lambda v: semver.parse_version(v.text).major)]
        ),
        cel.FunctionDecl(
            "minor", [_member("minor", integer, [s], lambda v: semver.parse_version(v.text).minor)]
        ),
        cel.FunctionDecl(
            "patch", [_member("patch", integer, [s], lambda v: semver.parse_version(v.text).patch)]
        ),
    ]


# --- Kubernetes lists, sets and regex libraries ----------------------------------------


def _list_decls() -> list[cel.FunctionDecl]:
    """isSorted, sum, min, max; list indexOf/lastIndexOf would clash with ext.Strings' names."""
    dyn, lst = cel.Type.DYN, _LIST
    return [
        cel.FunctionDecl(
            "isSorted", [_member("isSorted", cel.Type.BOOL, [lst], lambda a: a == sorted(a))]
        ),
        cel.FunctionDecl("sum", [_member("sum", dyn, [lst], sum)]),
        cel.FunctionDecl("min", [_member("min", dyn, [lst], min)]),
        cel.FunctionDecl("max", [_member("max", dyn, [lst], max)]),
    ]


def _includes(target: Any, item: Any) -> bool:
    """``includes()``: a list holds the item, or a scalar equals it (k8s.io/apiserver
    v0.37.2 pkg/cel/library/lists.go). Values of different CEL types are never equal."""
    candidates = target if isinstance(target, list) else [target]
    return any(_cel_equal(candidate, item) for candidate in candidates)


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL equality of two values: numbers compare by value across int and double; bools
    and other types only equal values of their own type."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        if isinstance(a, bool) or isinstance(b, bool):
            return type(a) is type(b) and a == b
        return a == b
    return type(a) is type(b) and bool(a == b)


def _includes_decls() -> list[cel.FunctionDecl]:
    """Declared only where DRAListTypeAttributes is on: without it the API server and the
    scheduler refuse ``includes`` as an undeclared reference."""
    # The runtime dispatches on concrete kinds only (a dyn parameter matches nothing), so
    # every receiver kind an attribute can have gets an overload per argument kind.
    scalars = (cel.Type.INT, cel.Type.DOUBLE, cel.Type.BOOL, cel.Type.STRING, _SEMVER_TYPE)
    overloads = [
        _member("includes", cel.Type.BOOL, [receiver, item], _includes)
        for receiver in (_LIST, *scalars)
        for item in scalars
    ]
    return [cel.FunctionDecl("includes", overloads)]


def _set_decls() -> list[cel.FunctionDecl]:
    boolean, lst = cel.Type.BOOL, _LIST
    return [
        cel.FunctionDecl(
            "sets.contains",
            [_global("sets.contains", boolean, [lst, lst], lambda a, b: all(x in a for x in b))],
        ),
        cel.FunctionDecl(
            "sets.equivalent",
            [
                _global(
                    "sets.equivalent",
                    boolean,
                    [lst, lst],
                    lambda a, b: all(x in a for x in b) and all(x in b for x in a),
                )
            ],
        ),
        cel.FunctionDecl(
            "sets.intersects",
            [_global("sets.intersects", boolean, [lst, lst], lambda a, b: any(x in a for x in b))],
        ),
    ]


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    found = [m.group(0) for m in re.finditer(pattern, text)]
    return found if limit < 0 else found[:limit]


def _regex_decls() -> list[cel.FunctionDecl]:
    string = cel.Type.STRING
    return [
        cel.FunctionDecl(
            "find",
            [
                _member(
                    "find",
                    string,
                    [string, string],
                    lambda text, pattern: m.group(0) if (m := re.search(pattern, text)) else "",
                )
            ],
        ),
        cel.FunctionDecl(
            "findAll",
            [
                _member("findAll", _STRING_LIST, [string, string], _find_all),
                _member("findAll", _STRING_LIST, [string, string, cel.Type.INT], _find_all),
            ],
        ),
    ]


_DEVICE_TYPE_NAME = "kubernetes.DRADevice"
"""The declared type of ``device``, named as upstream names it
(kubernetes/dynamic-resource-allocation cel/compile.go): ``driver`` a string,
``attributes`` map(string, map(string, dyn)), ``capacity`` map(string, map(string, ...)),
and ``allowMultipleAllocations`` a bool, which ``CelEngine`` refuses without
DRAConsumableCapacity (1.36+)."""
_MULTIPLE_ALLOCATIONS = "allowMultipleAllocations"
"""A device field CEL sees only with DRAConsumableCapacity (beta and on from 1.36)."""
_PROTO_STRING, _PROTO_BOOL, _PROTO_MESSAGE = 9, 8, 11
_PROTO_OPTIONAL, _PROTO_REPEATED = 1, 3


def _declare_device_type() -> None:
    """Register ``kubernetes.DRADevice`` as a message type, so that the type checker knows
    its fields: ``device.attributes[true]`` and ``device.driver == 1`` do not compile.
    Maps of maps are ``map<string, google.protobuf.Struct>``, which CEL reads as
    map(string, map(string, dyn))."""
    from google.protobuf import descriptor_pb2, struct_pb2  # noqa: F401 - registers Struct

    pool = descriptor_pool.Default()
    try:
        pool.FindMessageTypeByName(_DEVICE_TYPE_NAME)
        return
    except KeyError:
        pass
    package, _, name = _DEVICE_TYPE_NAME.rpartition(".")
    file = descriptor_pb2.FileDescriptorProto(
        name="dralet/dra_device_declaration.proto", package=package, syntax="proto3"
    )
    file.dependency.append("google/protobuf/struct.proto")
    message = file.message_type.add(name=name)
    message.field.add(name="driver", number=1, type=_PROTO_STRING, label=_PROTO_OPTIONAL)
    message.field.add(name=_MULTIPLE_ALLOCATIONS, number=4, type=_PROTO_BOOL, label=_PROTO_OPTIONAL)
    for number, field_name in ((2, "attributes"), (3, "capacity")):
        entry = message.nested_type.add(name=f"{field_name.capitalize()}Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=_PROTO_STRING, label=_PROTO_OPTIONAL)
        entry.field.add(
            name="value",
            number=2,
            type=_PROTO_MESSAGE,
            label=_PROTO_OPTIONAL,
            type_name=".google.protobuf.Struct",
        )
        message.field.add(
            name=field_name,
            number=number,
            type=_PROTO_MESSAGE,
            label=_PROTO_REPEATED,
            type_name=f".{_DEVICE_TYPE_NAME}.{entry.name}",
        )
    pool.Add(file)


@cache
def _checking_environment(list_type_attributes: bool) -> cel.Env:
    """The environment selectors are type-checked in: ``device`` has its declared type,
    and ``includes`` exists only with list-type attributes. Evaluation uses
    ``_environment`` (``device`` as dyn), which takes plain dicts."""
    _declare_device_type()
    return _new_environment(cel.Type(_DEVICE_TYPE_NAME), includes=list_type_attributes)


@cache
def _environment() -> cel.Env:
    """The one CEL environment every selector is evaluated in (built on first use); what
    it may run was decided by the type check."""
    return _new_environment(cel.Type.DYN, includes=True)


def _new_environment(device_type: cel.Type, *, includes: bool) -> cel.Env:
    functions = [
        *(_includes_decls() if includes else ()),
        *_comparison_decls(),
        *_quantity_decls(),
        *_semver_decls(),
        *_list_decls(),
        *_set_decls(),
        *_regex_decls(),
    ]
    return cel.NewEnv(
        descriptor_pool.Default(),
        variables={"device": device_type},
        functions=functions,
        extensions=[
            ext_strings.ExtStrings(STRINGS_EXTENSION_VERSION),
            ext_optional.ExtOptional(),
            ext_bindings.ExtBindings(),
        ],
    )


# --- compiling and evaluating ----------------------------------------------------------


def _compile_error(expression: str, error: Exception) -> CelCompileError:
    found = list(_COMPILE_ERROR.finditer(str(error)))
    if not found:
        return CelCompileError(f"compilation failed: {_STATUS_PREFIX.sub('', str(error))}")
    lines = expression.split("\n")
    line, column = int(found[0]["line"]), int(found[0]["column"])
    offset = sum(len(text) + 1 for text in lines[: line - 1]) + column - 1
    message = "; ".join(match["message"].strip() for match in found)
    return CelCompileError(f"compilation failed: {message}", column=max(offset, 0))


def _runtime_message(raw: object) -> str:
    text = _STATUS_PREFIX.sub("", str(raw))
    missing = _MISSING_KEY.match(text)
    if missing:
        return f"no such key: {missing['key']}"
    if text.endswith("<iter_range>"):
        # A macro (exists, all, map, ...) over a scalar: say it as the scheduler does.
        return "macro over a value that is not a list or map: expected iterable type"
    return text


class CompiledSelector:
    """One compiled selector expression; evaluate it with ``matches``."""

    __slots__ = ("_checked", "_engine", "_program", "clauses", "expression")

    def __init__(
        self,
        expression: str,
        *,
        program: cel.Expression,
        checked: cel.Expression,
        engine: CelEngine,
    ) -> None:
        self.expression = expression
        self._checked = checked
        self.clauses = cel_syntax.split_conjunction(expression)
        """The top-level ``&&`` clauses (one entry when the expression is not such a chain)."""
        self._program = program
        self._engine = engine

    def max_cost(self) -> int:
        """The worst-case cost kube-apiserver estimates for the expression (refused over
        ``celcost.MAX_COST``)."""
        from dralet.allocation import celcost

        return celcost.estimate_cost(self._checked.serialize()).max

    def matches(self, device: DeviceView) -> bool:
        """Whether the device is selected; raises ``CelRuntimeError`` when evaluation fails."""
        if device.conversion_error is not None:
            raise CelRuntimeError(device.conversion_error)
        result = self._program.eval(device.activation())
        kind = result.type()
        if kind == cel.Type.BOOL:
            return bool(result.value())
        if kind == cel.Type.ERROR:
            raise CelRuntimeError(_runtime_message(result.value()))
        raise CelRuntimeError(f"CEL result of type {kind.name()} could not be converted to bool")

    def first_false_clause(self, device: DeviceView) -> str | None:
        """The first ``&&`` clause that is false (or fails) for the device, if one can be told."""
        if len(self.clauses) == 1:
            return None
        for clause in self.clauses:
            try:
                if not self._engine.compile(clause).matches(device):
                    return clause
            except (CelCompileError, CelRuntimeError):
                return clause
        return None


class CelEngine:
    """Compiles selector expressions in the DRA environment, each expression string once."""

    def __init__(
        self,
        *,
        cache_compiled: bool = True,
        list_type_attributes: bool = False,
        consumable_capacity: bool = False,
    ) -> None:
        self._cache: dict[str, CompiledSelector] = {}
        self._cache_compiled = cache_compiled
        self._list_type_attributes = list_type_attributes
        """The DRAListTypeAttributes gate: ``includes()`` may be used."""
        self._consumable_capacity = consumable_capacity
        """The DRAConsumableCapacity gate: ``device.allowMultipleAllocations`` exists."""

    @property
    def caches_compiled(self) -> bool:
        """Whether each expression string is compiled only once."""
        return self._cache_compiled

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled selector; raises ``CelCompileError`` if it is not a valid selector."""
        cached = self._cache.get(expression)
        if cached is not None:
            return cached
        selector = self._compile(expression)
        if self._cache_compiled:
            self._cache[expression] = selector
        return selector

    def _compile(self, expression: str) -> CompiledSelector:
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise CelCompileError(
                f"expression is too long ({len(expression)} > {MAX_EXPRESSION_LENGTH} characters)"
            )
        try:
            checked = _checking_environment(self._list_type_attributes).compile(expression)
        except RuntimeError as error:
            failure = _compile_error(expression, error)
            if not self._list_type_attributes and "reference to 'includes'" in failure.message:
                failure = CelCompileError(
                    f"{failure.message} (includes() needs the DRAListTypeAttributes feature gate)",
                    column=failure.column,
                )
            raise failure from None
        if not self._consumable_capacity and _MULTIPLE_ALLOCATIONS in expression:
            self._refuse_gated_field(checked)
        environment = _environment()
        result_type = checked.return_type()
        if not any(result_type == accepted for accepted in _ACCEPTED_RESULT_TYPES):
            raise CelCompileError(
                f"must evaluate to bool or the unknown type, not {result_type.name()}"
            )
        rewritten = cel_syntax.default_missing_domains(expression)
        try:
            program = environment.compile(rewritten)
        except RuntimeError:
            program = environment.compile(expression)
        return CompiledSelector(expression, program=program, checked=checked, engine=self)

    @staticmethod
    def _refuse_gated_field(checked: cel.Expression) -> None:
        from dralet.allocation import celast

        fields = celast.selected_fields(
            celast.parse_checked(checked.serialize()), _DEVICE_TYPE_NAME
        )
        if _MULTIPLE_ALLOCATIONS in fields:
            raise CelCompileError(
                f"compilation failed: undefined field '{_MULTIPLE_ALLOCATIONS}' not found in "
                f"struct '{_DEVICE_TYPE_NAME}' (it needs the DRAConsumableCapacity feature gate)"
            )
