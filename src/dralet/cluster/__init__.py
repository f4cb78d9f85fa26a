"""A one-node cluster played locally, for ``dralet demo`` and ``dralet conformance``.

``controlplane`` makes the scheduler's and controllers' moves on the API stand-in
(``dralet.apiserver``): a Node, DeviceClasses, and ResourceClaims allocated and reserved
as the kubelet would find them. ``process`` runs ``dralet run`` as a real separate
process on a simulated node's directories: start it, SIGKILL it, start it again.
"""

from dralet.cluster.controlplane import (
    ControlPlane,
    allocated_status,
    claim_manifest,
    claim_request,
)
from dralet.cluster.process import DriverPaths, DriverProcess, driver_args

__all__ = [
    "ControlPlane",
    "DriverPaths",
    "DriverProcess",
    "allocated_status",
    "claim_manifest",
    "claim_request",
    "driver_args",
]
