"""Conformance cases for any DRA kubelet plugin (Go or Python), played through the kubelet
emulator over the real protocol: ``cases`` (ids, levels, rules), ``checks`` (their
bodies), ``runner`` (discovery and kubelet rounds), ``report`` (JSON and JUnit),
``claims`` (ResourceClaims in the API) and ``cdifiles`` (the CDI directory as a runtime
sees it). Used by ``dralet conformance`` and the tests.
"""

from dralet.conformance.cases import CASE_NAMES, CASES, Case, Level
from dralet.conformance.claims import ApiClaimFactory, ClaimFactory, Published
from dralet.conformance.report import CaseResult, SuiteResult
from dralet.conformance.runner import (
    KUBELET_VERSIONS,
    ConformanceSettings,
    SetupError,
    kubelet_service,
    run_suite,
)

__all__ = [
    "CASES",
    "CASE_NAMES",
    "KUBELET_VERSIONS",
    "ApiClaimFactory",
    "Case",
    "CaseResult",
    "ClaimFactory",
    "ConformanceSettings",
    "Level",
    "Published",
    "SetupError",
    "SuiteResult",
    "kubelet_service",
    "run_suite",
]
