"""A deliberately broken backend for ``dralet conformance --cluster`` tests: the example
driver's simulated GPUs, except that every prepared device hands the container the
first GPU's environment variable and device node, whichever device was allocated. Two
claims at once then share one device in their containers.

Copied into a driver image built by the tests (it imports only what that image has).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import dralet
from dralet.drivers.example import factory as example
from dralet.drivers.example.gpus import DEVICE_NODE_HOST_PATH, SimulatedGPUs


@dataclasses.dataclass
class OneDeviceForAll:
    """The example backend, with every prepared device's edits replaced by GPU 0's."""

    gpus: SimulatedGPUs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.gpus, name)

    async def prepare_claim(
        self, allocation: dralet.ClaimAllocation
    ) -> Sequence[dralet.PreparedDevice]:
        first = (dralet.DeviceNode(path="/dev/example-gpu0", host_path=DEVICE_NODE_HOST_PATH),)
        return [
            dataclasses.replace(
                prepared,
                edits=dataclasses.replace(
                    prepared.edits,
                    env=(f"EXAMPLE_GPU_0={self.gpus.gpu_uuid(0)}",),
                    device_nodes=first,
                ),
            )
            for prepared in await self.gpus.prepare_claim(allocation)
        ]


def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> dralet.ClaimBackend:
    return cast(dralet.ClaimBackend, OneDeviceForAll(example.simulated_gpus(settings, config)))
