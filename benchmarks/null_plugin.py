"""A DRA plugin that does nothing: the floor of a Python gRPC driver under load.

It serves ``v1.DRAPlugin`` on a unix socket with grpcio's asyncio server (as dralet
does, with the same server options) and answers every claim at once with one device
and one CDI id made from its UID: no engine, no store, no files, no backend. What a
client waits for here is grpcio's own work per call on this machine, the part no driver
written on grpcio can remove. It stops on SIGTERM.

    python benchmarks/null_plugin.py SOCKET
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

import grpc

from dralet.protocol import wire
from dralet.protocol.proto import dra_v1_pb2, dra_v1_pb2_grpc


class NullPlugin(dra_v1_pb2_grpc.DRAPluginServicer):
    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].devices.add(
                request_names=["gpu"],
                pool_name="node-a",
                device_name="gpu-0",
                cdi_device_ids=[f"gpu.example.com/claim={claim.uid}-gpu-0"],
            )
        return response

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].SetInParent()
        return response


async def serve(socket: str) -> None:
    server = grpc.aio.server(options=wire.server_options())
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(NullPlugin(), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(None)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
