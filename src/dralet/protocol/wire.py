"""Serving dralet's gRPC services with a request deserializer of our own, and a size limit.

grpc-python answers a request its deserializer cannot parse with UNKNOWN, before any
servicer code runs. Here the deserializer never raises: bytes that are not a valid
message become a ``MalformedRequest`` and the handler answers INVALID_ARGUMENT naming
the message type and what is wrong. Messages over ``MAX_RECEIVE_BYTES`` are refused by
gRPC itself with RESOURCE_EXHAUSTED, whose message names the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = [
    "MAX_RECEIVE_BYTES",
    "MalformedRequest",
    "add_service",
    "request_deserializer",
    "server_options",
]

MAX_RECEIVE_BYTES = 4 << 20
"""Largest request accepted (4 MiB, gRPC's default made explicit): about 60,000 claims in
one call, far beyond what one pod can carry."""


@dataclass(frozen=True)
class MalformedRequest:
    """Request bytes that are not a valid message of ``message_type``."""

    message_type: str
    reason: str

    def describe(self) -> str:
        return f"malformed {self.message_type} message: {self.reason}"


def server_options() -> list[tuple[str, Any]]:
    """Options for every gRPC server dralet starts."""
    return [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]


def request_deserializer(message_type: type[Message]) -> Callable[[bytes], Any]:
    """Parse request bytes into ``message_type``; a ``MalformedRequest`` instead of raising."""
    name = message_type.DESCRIPTOR.full_name

    def deserialize(raw: bytes) -> Message | MalformedRequest:
        try:
            return message_type.FromString(raw)
        except (DecodeError, ValueError, RecursionError) as exc:
            return MalformedRequest(name, str(exc) or type(exc).__name__)

    return deserialize


def _unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, MalformedRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.describe())
        return await behavior(request, context)

    return handle


def _unary_stream(behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
    async def handle(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        if isinstance(request, MalformedRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.describe())
        async for response in behavior(request, context):
            yield response

    return handle


def add_service(server: grpc.aio.Server, servicer: object, service: ServiceDescriptor) -> None:
    """Serve ``servicer``'s methods for ``service`` (unary or server-streaming) on ``server``."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        if method.client_streaming:
            raise ValueError(f"{method.full_name}: client streaming is not supported")
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _unary_stream(behavior),
                request_deserializer=request_deserializer(request_type),
                response_serializer=response_type.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(behavior),
                request_deserializer=request_deserializer(request_type),
                response_serializer=response_type.SerializeToString,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
