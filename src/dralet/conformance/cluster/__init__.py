"""``dralet conformance --cluster``: cases for a DRA driver installed on a live cluster.

``cases`` (ids, levels, rules, needs), ``objects`` (the labelled manifests a run
creates), ``probe`` (what a probe container saw), ``registration`` (the ResourceSlice
cases), ``runner`` (pods, claims, waits and cleanup through ``dralet.kube``), ``report``
(JSON and JUnit) and ``rbac`` (the least-privilege ClusterRole). Used by the CLI.
"""

from dralet.conformance.cluster.cases import CASE_NAMES, CASES, ClusterCase, with_prerequisites
from dralet.conformance.cluster.rbac import cluster_role, roles
from dralet.conformance.cluster.report import ClusterCaseResult, ClusterSuiteResult, Step
from dralet.conformance.cluster.runner import (
    DEFAULT_IMAGE,
    ClusterSettings,
    ClusterSetupError,
    run_cluster_suite,
)

__all__ = [
    "CASES",
    "CASE_NAMES",
    "DEFAULT_IMAGE",
    "ClusterCase",
    "ClusterCaseResult",
    "ClusterSettings",
    "ClusterSetupError",
    "ClusterSuiteResult",
    "Step",
    "cluster_role",
    "roles",
    "run_cluster_suite",
    "with_prerequisites",
]
