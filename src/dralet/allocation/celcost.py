"""Worst-case cost of a type-checked DRA selector expression, as kube-apiserver estimates it.

kube-apiserver refuses a selector whose estimated worst-case cost exceeds
``CELSelectorExpressionMaxCost`` (1,000,000; k8s.io/api v0.37.2 resource/v1 types.go).
The estimate follows CEL's static cost model (cel-go checker/cost.go) with the
Kubernetes function costs (k8s.io/apiserver v0.37.2 pkg/cel/library/cost.go) and the
declared sizes of everything reachable from ``device`` (k8s.io/dynamic-resource-allocation
v0.37.2 cel/compile.go, its size estimator). Presence tests (``has()``) cost nothing, as in the
Kubernetes base environment.

Input is the checked AST the CEL runtime serializes; this module needs no CEL runtime.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dralet.allocation import celast
from dralet.protocol.proto import cel_checked_pb2 as pb

__all__ = ["MAX_COST", "Range", "estimate_cost"]

MAX_COST = 1_000_000
"""CELSelectorExpressionMaxCost."""

_U64 = 2**64 - 1
_STRING_TRAVERSAL = 0.1
_REGEX_LENGTH = 0.25
_LIST_CREATE, _MAP_CREATE, _STRUCT_CREATE = 10, 30, 40
_ACCUMULATORS = ("@result", "__result__")

# Declared sizes of the DRA ``device`` variable (k8s.io/api v0.37.2 resource/v1 limits).
_DRIVER_NAME, _DOMAIN, _IDENTIFIER = 63, 63, 32
_PER_DEVICE = 32
"""ResourceSliceMaxAttributesAndCapacitiesPerDevice: entries of each attribute/capacity map."""
_ATTRIBUTE_VALUE = max(64, 48)
"""An attribute value's size: DeviceAttributeMaxValueLength or, for list-type values,
ResourceSliceMaxAttributeValuesPerDevice; the declared type takes the larger."""

_QUANTITY_TYPES = frozenset({"dralet.cel.v1.Quantity"})
_SEMVER_TYPES = frozenset({"dralet.cel.v1.Semver"})


@dataclass(frozen=True)
class Range:
    """A [min, max] estimate of a cost or a size, saturating at 2^64-1 like upstream."""

    min: int
    max: int

    def __add__(self, other: Range) -> Range:
        return Range(min(self.min + other.min, _U64), min(self.max + other.max, _U64))

    def __mul__(self, other: Range) -> Range:
        return Range(min(self.min * other.min, _U64), min(self.max * other.max, _U64))

    def factor(self, per_unit: float) -> Range:
        return Range(_times(self.min, per_unit), _times(self.max, per_unit))

    def union(self, other: Range) -> Range:
        return Range(min(self.min, other.min), max(self.max, other.max))


def _times(value: int, per_unit: float) -> int:
    product = math.ceil(float(value) * per_unit)
    return _U64 if product >= 2.0**64 else int(product)


def _fixed(value: int) -> Range:
    return Range(value, value)


_UNKNOWN = Range(0, _U64)
_ONE = _fixed(1)
_ZERO = _fixed(0)


# --- the declared device type, as the size estimator walks it ----------------------------


@dataclass(frozen=True)
class _Decl:
    max_elements: int = 0
    fields: dict[str, _Decl] = field(default_factory=dict)
    key: _Decl | None = None
    elem: _Decl | None = None


_ATTRIBUTE = _Decl(_ATTRIBUTE_VALUE)
_QUANTITY = _Decl(0)


def _map(key: _Decl, elem: _Decl) -> _Decl:
    return _Decl(_PER_DEVICE, key=key, elem=elem)


_DEVICE = _Decl(
    fields={
        "driver": _Decl(_DRIVER_NAME),
        "allowMultipleAllocations": _Decl(1),
        "attributes": _map(_Decl(_DOMAIN), _map(_Decl(_IDENTIFIER), _ATTRIBUTE)),
        "capacity": _map(_Decl(_DOMAIN), _map(_Decl(_IDENTIFIER), _QUANTITY)),
    }
)


def _declared_size(path: Sequence[str]) -> Range | None:
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        elif name in node.fields:
            node = node.fields[name]
        elif node.elem is _ATTRIBUTE:
            # Any attribute name inside a domain map has the attribute value's size.
            node = _ATTRIBUTE
        else:
            return None
    return Range(0, node.max_elements)


def _is_capacity_value(path: Sequence[str]) -> bool:
    """Upstream declares capacity values as Quantity; dralet's checker sees them as dyn."""
    return len(path) == 4 and tuple(path[:3]) == ("device", "capacity", "@values")


# --- types ---------------------------------------------------------------------------------


def _kind(t: pb.Type | None) -> str:
    """The kind cel-go would give the type: map, struct, list, string, bytes, a scalar,
    dyn, type_param or opaque."""
    if t is None:
        return "dyn"
    which = t.WhichOneof("type_kind")
    if which == "primitive" or which == "wrapper":
        return pb.Type.PrimitiveType.Name(t.primitive if which == "primitive" else t.wrapper)
    if which == "map_type":
        return "map"
    if which == "list_type":
        return "list"
    if which == "message_type":
        return "map" if t.message_type == "google.protobuf.Struct" else "struct"
    if which == "well_known":
        return pb.Type.WellKnownType.Name(t.well_known)
    if which == "abstract_type":
        return "opaque"
    return which or "dyn"


_SCALARS = frozenset({"BOOL", "DOUBLE", "DURATION", "INT64", "TIMESTAMP", "UINT64"})


def _is_scalar(t: pb.Type | None) -> bool:
    kind = _kind(t)
    if kind in _SCALARS:
        return True
    if kind == "opaque" and t is not None and t.abstract_type.name == "optional_type":
        params = t.abstract_type.parameter_types
        return bool(params) and _is_scalar(params[0])
    return False


def _struct_name(t: pb.Type | None) -> str:
    return t.message_type if t is not None and t.WhichOneof("type_kind") == "message_type" else ""


# --- the estimator -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    """What a function estimator may know of an argument or target."""

    path: tuple[str, ...]
    type: pb.Type | None
    expr: pb.Expr | None
    computed: Range | None

    def size(self) -> Range:
        """The computed size, else the declared one, else unknown."""
        if self.computed is not None:
            return self.computed
        declared = _declared_size(self.path)
        return declared if declared is not None else _UNKNOWN


@dataclass
class _Local:
    path: tuple[str, ...]
    size: Range | None
    entry: _Entry | None


@dataclass(frozen=True)
class _Entry:
    """Sizes of a container's keys (or indices) and values, where both are known."""

    container: str
    key: Range
    value: Range

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.container, self.key.union(other.key), self.value.union(other.value))


_CallEstimate = tuple[Range, Range | None]
"""(cost of the call itself, size of its result if known)."""


class _Coster:
    def __init__(self, checked: pb.CheckedExpr) -> None:
        self._checked = checked
        self._paths: dict[int, tuple[str, ...]] = {}
        self._sizes: dict[int, Range] = {}
        self._entries: dict[int, _Entry] = {}
        self._locals: dict[str, list[_Local]] = {}

    # bookkeeping

    def _type(self, e: pb.Expr) -> pb.Type | None:
        return self._checked.type_map.get(e.id)

    def _path(self, e: pb.Expr) -> tuple[str, ...]:
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self._peek(e.ident_expr.name)
            if local is not None:
                return local.path
        return self._paths.get(e.id, ())

    def _peek(self, name: str) -> _Local | None:
        stack = self._locals.get(name)
        return stack[-1] if stack else None

    def _push(
        self, name: str, path: tuple[str, ...], size: Range | None, entry: _Entry | None
    ) -> None:
        self._locals.setdefault(name, []).append(_Local(path, size, entry))

    def _pop(self, name: str) -> None:
        self._locals[name].pop()

    def _node(self, e: pb.Expr) -> _Node:
        path = self._path(e)
        if path and path[0] in _ACCUMULATORS:
            path = ()
        return _Node(path, self._node_type(e, path), e, self._size(e))

    def _node_type(self, e: pb.Expr, path: tuple[str, ...]) -> pb.Type | None:
        if _is_capacity_value(path):
            return pb.Type(message_type=next(iter(_QUANTITY_TYPES)))
        return self._type(e)

    def _size(self, e: pb.Expr) -> Range | None:
        if e.id in self._sizes:
            return self._sizes[e.id]
        literal = _literal_size(e)
        if literal is not None:
            return literal
        declared = _declared_size(self._path(e))
        if declared is not None:
            self._sizes[e.id] = declared
            return declared
        if _is_scalar(self._type(e)):
            return _ONE
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self._peek(e.ident_expr.name)
            if local is not None and local.size is not None:
                return local.size
        return None

    def _size_or_unknown(self, e: pb.Expr) -> Range:
        size = self._size(e)
        return size if size is not None else _UNKNOWN

    def _entry(self, e: pb.Expr) -> _Entry | None:
        if e.id in self._entries:
            return self._entries[e.id]
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self._peek(e.ident_expr.name)
            if local is not None:
                return local.entry
        return None

    def _set_size(self, e: pb.Expr, size: Range | None) -> None:
        if size is not None:
            self._sizes[e.id] = size

    def _set_entry(self, e: pb.Expr, entry: _Entry | None) -> None:
        if entry is not None:
            self._entries[e.id] = entry

    # cost by expression kind

    def cost(self, e: pb.Expr) -> Range:
        kind = e.WhichOneof("expr_kind")
        if kind == "const_expr":
            return _ZERO
        if kind == "ident_expr":
            local = self._peek(e.ident_expr.name)
            self._paths[e.id] = local.path if local is not None else (e.ident_expr.name,)
            return _ONE
        if kind == "select_expr":
            return self._select(e)
        if kind == "call_expr":
            return self._call(e)
        if kind == "list_expr":
            return self._list(e)
        if kind == "struct_expr":
            return self._struct(e)
        if kind == "comprehension_expr":
            return self._bind(e) if _is_bind(e.comprehension_expr) else self._comprehension(e)
        return _ZERO

    def _select(self, e: pb.Expr) -> Range:
        select = e.select_expr
        if select.test_only:
            return self.cost(select.operand)
        total = self.cost(select.operand)
        operand_path = self._path(select.operand)
        kind = _kind(self._node_type(select.operand, operand_path))
        if kind in ("map", "struct", "type_param"):
            total = total + _ONE
        self._paths[e.id] = (*operand_path, select.field)
        return total

    def _list(self, e: pb.Expr) -> Range:
        elements = e.list_expr.elements
        total = _ZERO
        item = Range(_U64 if elements else 0, 0)
        for element in elements:
            total = total + self.cost(element)
            item = item.union(self._size_or_unknown(element))
        self._set_entry(e, _Entry("list", _ONE, item))
        return total + _fixed(_LIST_CREATE)

    def _struct(self, e: pb.Expr) -> Range:
        struct = e.struct_expr
        total = _ZERO
        if struct.message_name:
            for entry in struct.entries:
                total = total + self.cost(entry.value)
            return total + _fixed(_STRUCT_CREATE)
        empty = not struct.entries
        keys = Range(0 if empty else _U64, 0)
        values = Range(0 if empty else _U64, 0)
        for entry in struct.entries:
            total = total + self.cost(entry.map_key) + self.cost(entry.value)
            keys = keys.union(self._size_or_unknown(entry.map_key))
            values = values.union(self._size_or_unknown(entry.value))
        self._set_entry(e, _Entry("map", keys, values))
        return total + _fixed(_MAP_CREATE)

    def _comprehension(self, e: pb.Expr) -> Range:
        comp = e.comprehension_expr
        total = self.cost(comp.iter_range) + self.cost(comp.accu_init)
        self._push_local(comp.accu_var, comp.accu_init)
        if comp.iter_var2:
            self._push_iteration(comp.iter_var, comp.iter_range, keys=True)
            self._push_iteration(comp.iter_var2, comp.iter_range, keys=False)
        else:
            self._push_iteration(comp.iter_var, comp.iter_range, keys=None)
        loop = self.cost(comp.loop_condition)
        step = self.cost(comp.loop_step)
        self._pop(comp.iter_var)
        if comp.iter_var2:
            self._pop(comp.iter_var2)
        total = total + self.cost(comp.result)
        self._pop(comp.accu_var)
        count = self._size_or_unknown(comp.iter_range)
        total = total + count * (step + loop)
        init_kind = comp.accu_init.WhichOneof("expr_kind")
        if init_kind == "const_expr":
            self._set_size(e, self._size(comp.accu_init))
        elif init_kind == "list_expr" or (
            init_kind == "struct_expr" and not comp.accu_init.struct_expr.message_name
        ):
            self._set_size(e, count)
            self._set_entry(e, self._entry(comp.loop_step))
        return total

    def _bind(self, e: pb.Expr) -> Range:
        comp = e.comprehension_expr
        total = self.cost(comp.iter_range) + self.cost(comp.accu_init)
        self._push_local(comp.accu_var, comp.accu_init)
        total = total + self.cost(comp.result)
        self._pop(comp.accu_var)
        self._set_size(e, self._size(comp.result))
        self._set_entry(e, self._entry(comp.result))
        return total

    def _push_local(self, name: str, init: pb.Expr) -> None:
        self._push(name, self._path(init), self._size(init), self._entry(init))

    def _push_iteration(self, name: str, over: pb.Expr, *, keys: bool | None) -> None:
        """An iteration variable: keys=None for the one variable of a classic macro
        (a list's items or a map's keys), True/False for two-variable comprehensions."""
        entry = self._entry(over)
        container = entry.container if entry is not None else _kind(self._type(over))
        is_list = container == "list"
        if keys is None:
            keys = not is_list
            size = entry.key if entry is not None and keys else entry.value if entry else None
            step = "@keys" if keys else "@items"
        elif keys:
            size = entry.key if entry is not None else None
            step = "@indices" if is_list else "@keys"
        else:
            size = entry.value if entry is not None else None
            step = "@items" if is_list else "@values"
        self._push(name, (*self._path(over), step), size, None)

    def _call(self, e: pb.Expr) -> Range:
        call = e.call_expr
        if call.function == "dyn" and len(call.args) == 1:
            argument = call.args[0]
            total = _ONE + self.cost(argument)
            self._set_size(e, self._size(argument))
            self._set_entry(e, self._entry(argument))
            return total
        argument_costs = [self.cost(argument) for argument in call.args]
        arguments = [self._node(argument) for argument in call.args]
        reference = self._checked.reference_map.get(e.id)
        overloads = list(reference.overload_id) if reference is not None else []
        if not overloads:
            return _ZERO
        total = _ZERO
        target: _Node | None = None
        if call.HasField("target"):
            total = total + self.cost(call.target)
            target = self._node(call.target)
        function_cost = Range(_U64, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self._function(
                e, call.function, overload, target, arguments, argument_costs
            )
            function_cost = function_cost.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload in ("index_list", "index_map") and call.args:
                entry = self._entry(call.args[0])
                result_size = entry.value if entry is not None else None
                step = "@items" if overload == "index_list" else "@values"
                self._paths[e.id] = (*self._path(call.args[0]), step)
            if result_size is None:
                result_size = self._size(e)
        self._set_size(e, result_size)
        return total + function_cost

    def _function(
        self,
        e: pb.Expr,
        function: str,
        overload: str,
        target: _Node | None,
        arguments: list[_Node],
        argument_costs: list[Range],
    ) -> tuple[Range, Range | None]:
        arguments_total = _ZERO
        for cost in argument_costs:
            arguments_total = arguments_total + cost
        estimate = _SETS.get(overload)
        if estimate is not None and len(arguments) == 2:
            return estimate(arguments) + arguments_total, None
        kubernetes = _kubernetes_call(function, overload, target, arguments)
        if kubernetes is not None:
            cost, size = kubernetes
            return cost + arguments_total, size
        return self._builtin(e, overload, target, arguments, argument_costs, arguments_total)

    def _builtin(
        self,
        e: pb.Expr,
        overload: str,
        target: _Node | None,
        arguments: list[_Node],
        costs: list[Range],
        arguments_total: Range,
    ) -> tuple[Range, Range | None]:
        sizes = [_computed(argument) for argument in arguments]
        if overload == "string_format" and target is not None:
            return _computed(target).factor(_STRING_TRAVERSAL) + arguments_total, None
        if overload == "string_to_bytes" and len(arguments) == 1:
            size = sizes[0]
            return size.factor(_STRING_TRAVERSAL) + arguments_total, Range(
                size.min, _sat(size.max * 4)
            )
        if overload == "bytes_to_string" and len(arguments) == 1:
            size = sizes[0]
            return size.factor(_STRING_TRAVERSAL) + arguments_total, Range(size.min // 4, size.max)
        if overload == "strings_quote" and len(arguments) == 1:
            size = sizes[0]
            result = Range(_sat(size.min + 2), _sat(size.max * 2 + 2))
            return size.factor(_STRING_TRAVERSAL) + arguments_total, result
        if overload in ("starts_with_string", "ends_with_string") and len(arguments) == 1:
            return sizes[0].factor(_STRING_TRAVERSAL) + arguments_total, None
        if overload == "in_list" and len(arguments) == 2:
            return sizes[1].factor(1) + arguments_total, None
        if overload == "matches_string" and target is not None and len(arguments) == 1:
            text = (_computed(target) + _ONE).factor(_STRING_TRAVERSAL)
            regex = sizes[0].factor(_REGEX_LENGTH)
            return text * regex + arguments_total, None
        if overload == "contains_string" and target is not None and len(arguments) == 1:
            text = _computed(target).factor(_STRING_TRAVERSAL)
            return text * sizes[0].factor(_STRING_TRAVERSAL) + arguments_total, None
        if overload in ("logical_or", "logical_and"):
            left, right = costs
            return Range(left.min, (left + right).max), None
        if overload == "conditional":
            size = sizes[1].union(sizes[2])
            first = self._entry(arguments[1].expr) if arguments[1].expr else None
            second = self._entry(arguments[2].expr) if arguments[2].expr else None
            self._set_entry(e, first.union(second) if first is not None else None)
            return costs[0] + costs[1].union(costs[2]), size
        if overload in ("add_string", "add_bytes", "add_list") and len(arguments) == 2:
            size = sizes[0] + sizes[1]
            first = self._entry(arguments[0].expr) if arguments[0].expr else None
            second = self._entry(arguments[1].expr) if arguments[1].expr else None
            self._set_entry(e, first.union(second) if first is not None else None)
            if overload == "add_list":
                return _ONE + arguments_total, size
            return size.factor(_STRING_TRAVERSAL) + arguments_total, size
        if overload in _SIZED_COMPARISONS:
            smallest = min(sizes[0].max, sizes[1].max)
            return Range(1 if smallest > 0 else 0, smallest).factor(
                _STRING_TRAVERSAL
            ) + arguments_total, None
        return _ONE + arguments_total, None


_SIZED_COMPARISONS = frozenset(
    {
        "equals",
        "not_equals",
        *(
            f"{op}_{kind}"
            for op in ("less", "greater", "less_equals", "greater_equals")
            for kind in ("string", "bytes")
        ),
    }
)


def _sat(value: int) -> int:
    return min(value, _U64)


def _computed(node: _Node) -> Range:
    return node.computed if node.computed is not None else _UNKNOWN


def _literal_size(e: pb.Expr) -> Range | None:
    kind = e.WhichOneof("expr_kind")
    if kind == "list_expr":
        return _fixed(len(e.list_expr.elements))
    if kind == "struct_expr" and not e.struct_expr.message_name:
        return _fixed(len(e.struct_expr.entries))
    if kind != "const_expr":
        return None
    constant = e.const_expr
    which = constant.WhichOneof("constant_kind")
    if which == "string_value":
        return _fixed(len(constant.string_value))
    if which == "bytes_value":
        return _fixed(len(constant.bytes_value))
    return _ONE


def _is_bind(comp: pb.Expr.Comprehension) -> bool:
    return (
        comp.iter_range.WhichOneof("expr_kind") == "list_expr"
        and not comp.iter_range.list_expr.elements
        and comp.loop_condition.WhichOneof("expr_kind") == "const_expr"
        and comp.loop_condition.const_expr.WhichOneof("constant_kind") == "bool_value"
        and not comp.loop_condition.const_expr.bool_value
        and comp.accu_var not in _ACCUMULATORS
    )


def _sets_cost(per_pair: float) -> Callable[[list[_Node]], Range]:
    def estimate(arguments: list[_Node]) -> Range:
        return (arguments[0].size() * arguments[1].size()).factor(per_pair) + _ONE

    return estimate


_SETS: dict[str, Callable[[list[_Node]], Range]] = {
    "global_sets.contains_LIST<DYN>_LIST<DYN>": _sets_cost(1),
    "global_sets.intersects_LIST<DYN>_LIST<DYN>": _sets_cost(1),
    "global_sets.equivalent_LIST<DYN>_LIST<DYN>": _sets_cost(2),
}
"""ext.Sets' own estimates (cel-go ext/sets.go), by dralet's overload ids."""


# --- Kubernetes function costs -------------------------------------------------------------

_NOMINAL = frozenset(
    {
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
    }
)
_PARSERS = frozenset({"quantity", "isQuantity", "semver", "isSemver"})
_LIST_SCANS = frozenset({"isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"})


def _element(node: _Node) -> _Node | None:
    t = node.type
    if t is None or t.WhichOneof("type_kind") != "list_type":
        return None
    path = (*node.path, "@items") if node.path else ()
    return _Node(path, t.list_type.elem_type, None, None)


def _kubernetes_call(
    function: str, overload: str, target: _Node | None, arguments: list[_Node]
) -> _CallEstimate | None:
    """The Kubernetes libraries' estimate for a call, or None where CEL's own applies."""
    if function in _LIST_SCANS and target is not None:
        element = _element(target)
        if element is not None:
            per_element = _ONE
            if _kind(element.type) in ("STRING", "BYTES"):
                per_element = per_element + element.size().factor(_STRING_TRAVERSAL)
            return target.size() * per_element, None
        if function == "includes":
            # A dyn target may be a list: one comparison per element, at its declared size.
            return target.size(), None
        return target.size().factor(_STRING_TRAVERSAL), None
    if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
        size = target.size()
        return size.factor(_STRING_TRAVERSAL), size
    if function == "replace" and target is not None and len(arguments) >= 2:
        return _replace(target.size(), arguments[0].size(), arguments[1].size())
    if function == "split" and target is not None:
        size = target.size()
        most = size.max
        if len(arguments) > 1 and arguments[1].expr is not None:
            limit = arguments[1].expr
            if (
                limit.WhichOneof("expr_kind") == "const_expr"
                and limit.const_expr.WhichOneof("constant_kind") == "int64_value"
            ):
                most = limit.const_expr.int64_value % 2**64
        return size.factor(2 * _STRING_TRAVERSAL), Range(0, most)
    if function == "join" and target is not None:
        return _join(target, arguments)
    if function in ("find", "findAll") and target is not None and arguments:
        size = target.size()
        text = (size + _ONE).factor(_STRING_TRAVERSAL)
        regex = arguments[0].size().factor(_REGEX_LENGTH)
        return text * regex, Range(0, size.max)
    if function in _PARSERS and arguments:
        return arguments[0].size().factor(_STRING_TRAVERSAL), None
    if function in _NOMINAL:
        return _ONE, None
    if function == "_==_" and len(arguments) == 2:
        left, right = (_struct_name(node.type) for node in arguments)
        for names in (_QUANTITY_TYPES, _SEMVER_TYPES):
            if left in names and right in names:
                return _ONE, None
    return None


def _replace(size: Range, old: Range, new: Range) -> _CallEstimate:
    if old.min == 0:
        most_count = size.max + 1 if size.max < _U64 else size.max
        most_kept = size.max
    elif new.max <= old.min:
        most_count, most_kept = 0, size.max
    else:
        most_count, most_kept = math.ceil(size.max / old.min), 0
    if old.max == 0:
        least_count = size.min + 1 if size.min < _U64 else size.min
        least_kept = size.min
    elif old.max <= new.min:
        least_count, least_kept = 0, size.min
    else:
        least_count, least_kept = math.ceil(size.min / old.max), 0
    result = Range(least_count, most_count) * new + Range(least_kept, most_kept)
    return size.factor(2 * _STRING_TRAVERSAL), result


def _join(target: _Node, arguments: list[_Node]) -> _CallEstimate:
    count = target.size()
    element = _element(target)
    size = count * element.size() if element is not None else _ZERO
    if arguments:
        separators = Range(max(count.min - 1, 0), max(count.max - 1, 0))
        size = size + arguments[0].size() * separators
    return size.factor(_STRING_TRAVERSAL), size


def estimate_cost(checked: bytes) -> Range:
    """The estimated cost range of a checked expression, from its serialized form (an
    ``Any`` holding a CheckedExpr, as ``cel.Expression.serialize()`` returns it)."""
    expression = celast.parse_checked(checked)
    return _Coster(expression).cost(expression.expr)
