"""The type-checked AST of a CEL expression, read from the runtime's serialized form.

The CEL runtime hands out a checked expression only as bytes (an ``Any`` holding
``cel.expr.CheckedExpr``); this module turns them into dralet's mirror of that message
(``dralet.protocol.proto.cel_checked_pb2``) and answers questions about it.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import any_pb2

from dralet.protocol.proto import cel_checked_pb2 as pb

__all__ = ["children", "parse_checked", "selected_fields"]


def parse_checked(serialized: bytes) -> pb.CheckedExpr:
    """The checked expression inside ``cel.Expression.serialize()``'s bytes."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    checked = pb.CheckedExpr()
    checked.ParseFromString(wrapper.value)
    return checked


def children(e: pb.Expr) -> Iterator[pb.Expr]:
    """The direct subexpressions of ``e``."""
    kind = e.WhichOneof("expr_kind")
    if kind == "select_expr":
        yield e.select_expr.operand
    elif kind == "call_expr":
        if e.call_expr.HasField("target"):
            yield e.call_expr.target
        yield from e.call_expr.args
    elif kind == "list_expr":
        yield from e.list_expr.elements
    elif kind == "struct_expr":
        for entry in e.struct_expr.entries:
            if entry.HasField("map_key"):
                yield entry.map_key
            yield entry.value
    elif kind == "comprehension_expr":
        comp = e.comprehension_expr
        yield from (comp.iter_range, comp.accu_init, comp.loop_condition, comp.loop_step)
        yield comp.result


def selected_fields(checked: pb.CheckedExpr, message: str) -> set[str]:
    """The fields selected (or presence-tested) on values of the message type ``message``."""
    found: set[str] = set()
    pending = [checked.expr]
    while pending:
        e = pending.pop()
        if e.WhichOneof("expr_kind") == "select_expr":
            operand = checked.type_map.get(e.select_expr.operand.id)
            if operand is not None and operand.message_type == message:
                found.add(e.select_expr.field)
        pending.extend(children(e))
    return found
