"""Fixtures of the cluster-mode conformance tests: the install tests' image, helm and
real nodes (imported, so one definition serves both suites)."""

from tests.install.conftest import helm, image, kubectl, node, operator, two_nodes

__all__ = ["helm", "image", "kubectl", "node", "operator", "two_nodes"]
