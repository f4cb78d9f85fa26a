"""The test kit for a driver author's own tests.

- ``check_backend`` (``check``): ``dralet conformance`` against the author's backend in one
  call (``check_backend(factory, driver_name=...)``), restarts included; it returns the
  suite's result or raises ``ConformanceFailure`` naming every failed case.
- ``StrictBackend`` (``strict``): a fake backend that fails a test when ``release`` does
  not get back what ``prepare`` returned, alone or around the author's backend.
- ``MemoryClaims``, ``allocated_claim`` and ``claim_ref`` (``claims``): ResourceClaims in
  memory, as the scheduler leaves them, behind the ``ClaimSource`` a driver reads (and the
  list ``dralet audit`` reads), and the ``ClaimRef`` a backend is called with for one.
- ``MemoryDevices`` (``memory``): a backend whose devices cost nothing, for tests of
  what sits around a backend; a subclass changes what one device's ``prepare`` or
  ``release`` does (waits, fails, records) and keeps the claim-level calls.
- ``running_node`` and ``node_settings`` (``node``): the author's backend run as a real
  driver in the test's event loop, called by a kubelet emulator over its sockets.
- ``audit_findings`` (``audit``): what ``dralet audit`` finds on a test's node (records,
  CDI files, backend and claims that disagree); a test ends with it empty.

The kubelet emulator (``dralet.kubelet``), the API stand-in (``dralet.apiserver``) and
``dralet conformance`` (``dralet.conformance``) are there for tests that need more.
"""

from dralet.testing.audit import audit_findings
from dralet.testing.check import ConformanceFailure, check_backend, check_backend_async
from dralet.testing.claims import MemoryClaims, allocated_claim, claim_ref
from dralet.testing.memory import MemoryDevices
from dralet.testing.node import RunningNode, kubelet_claim, node_settings, running_node
from dralet.testing.strict import StrictBackend

__all__ = [
    "ConformanceFailure",
    "MemoryClaims",
    "MemoryDevices",
    "RunningNode",
    "StrictBackend",
    "allocated_claim",
    "audit_findings",
    "check_backend",
    "check_backend_async",
    "claim_ref",
    "kubelet_claim",
    "node_settings",
    "running_node",
]
