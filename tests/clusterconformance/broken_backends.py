"""Deliberately broken backends for ``dralet conformance --cluster`` tests: the example
driver's simulated GPUs with one thing wrong each.

- ``one_device_for_all``: every prepared device hands the container the first GPU's
  environment variable and device node, whichever device was allocated: two claims at
  once share one device in their containers.
- ``never_releases``: every release fails, so the kubelet's unprepare never succeeds.

Copied into a driver image built by the tests (it imports only what that image has).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import dralet
from dralet.drivers.example import factory as example
from dralet.drivers.example.gpus import DEVICE_NODE_HOST_PATH, SimulatedGPUs


@dataclasses.dataclass
class _Wrapped:
    """The example backend, every method passed through unless overridden."""

    gpus: SimulatedGPUs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.gpus, name)


class OneDeviceForAll(_Wrapped):
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


class NeverReleases(_Wrapped):
    async def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        raise dralet.ClaimError(allocation.claim.uid, "this driver never releases a device")


def one_device_for_all(
    settings: dralet.Settings, config: dralet.DriverConfig
) -> dralet.ClaimBackend:
    return cast(dralet.ClaimBackend, OneDeviceForAll(example.simulated_gpus(settings, config)))


def never_releases(settings: dralet.Settings, config: dralet.DriverConfig) -> dralet.ClaimBackend:
    return cast(dralet.ClaimBackend, NeverReleases(example.simulated_gpus(settings, config)))
