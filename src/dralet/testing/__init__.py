"""The test kit for a driver author's own tests.

- ``StrictBackend`` (``strict``): a fake backend that fails a test when ``release`` does
  not get back what ``prepare`` returned, alone or around the author's backend.
- ``MemoryClaims`` and ``allocated_claim`` (``claims``): ResourceClaims in memory, as
  the scheduler leaves them, behind the ``ClaimSource`` a driver reads.
- ``MemoryDevices`` (``memory``): a backend whose devices cost nothing, for tests of
  what sits around a backend.
- ``running_node`` and ``node_settings`` (``node``): the author's backend run as a real
  driver in the test's event loop, called by a kubelet emulator over its sockets.

The kubelet emulator (``dralet.kubelet``), the API stand-in (``dralet.apiserver``) and
``dralet conformance`` (``dralet.conformance``) are there for tests that need more.
"""

from dralet.testing.claims import MemoryClaims, allocated_claim
from dralet.testing.memory import MemoryDevices
from dralet.testing.node import RunningNode, kubelet_claim, node_settings, running_node
from dralet.testing.strict import StrictBackend

__all__ = [
    "MemoryClaims",
    "MemoryDevices",
    "RunningNode",
    "StrictBackend",
    "allocated_claim",
    "kubelet_claim",
    "node_settings",
    "running_node",
]
