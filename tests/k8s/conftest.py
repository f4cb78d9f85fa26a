"""The shared driver node of the end-to-end and RBAC tests (tests/k8s/drivernode.py)."""

from tests.k8s.drivernode import node

__all__ = ["node"]
