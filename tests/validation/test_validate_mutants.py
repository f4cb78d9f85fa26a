"""The mutant generator of the real-server differential (tests/k8s/validate_mutants.py)
reaches every field that the OpenAPI schema declares for each kind and version it mutates,
and the bounded CI sample still covers every class of mutant of every kind."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from tests.k8s import validate_mutants
from tests.k8s.test_validate_differential import mutation_seeds

from dralet.validation import engine
from dralet.validation.documents import Source
from dralet.validation.targets import Target

RELEASE = "1.37"
_WORKLOAD_API_VERSIONS = {"Pod": "v1", "Deployment": "apps/v1"}


@pytest.fixture(scope="module")
def mutants() -> list[validate_mutants.Mutant]:
    return list(validate_mutants.all_mutants(mutation_seeds(RELEASE), release=RELEASE))


def _api_version(kind: str, version: str) -> str:
    return _WORKLOAD_API_VERSIONS.get(kind, f"resource.k8s.io/{version}")


def _claim_field(field: str) -> bool:
    return any(part in {"claims", "resourceClaims"} for part in field.split("."))


def test_every_schema_field_of_every_mutated_kind_is_reached(
    mutants: list[validate_mutants.Mutant],
) -> None:
    reached: dict[tuple[str, str], set[str]] = defaultdict(set)
    for mutant in mutants:
        reached[mutant.kind, mutant.version].add(mutant.field)
    missing = {}
    for (kind, version), fields in reached.items():
        wanted = validate_mutants.schema_fields(_api_version(kind, version), kind, release=RELEASE)
        if kind in _WORKLOAD_API_VERSIONS:
            wanted = {f for f in wanted if _claim_field(f)}
        if wanted - fields:
            missing[kind, version] = sorted(wanted - fields)
    assert {kind for kind, _ in reached} >= {
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "DeviceTaintRule",
        "Pod",
    }
    assert missing == {}


def test_the_ci_sample_covers_every_class_of_every_kind(
    mutants: list[validate_mutants.Mutant],
) -> None:
    classes = {(m.kind, validate_mutants.operator_class(m)) for m in mutants}
    picked = validate_mutants.sample(mutants, size=len(classes), seed=1)
    assert {(m.kind, validate_mutants.operator_class(m)) for m in picked} == classes


def test_no_mutant_crashes_validate(mutants: list[validate_mutants.Mutant]) -> None:
    """A fixed sample, several to a run as one multi-document file, each class at least
    once: every one gets diagnostics or a clean verdict."""
    picked = validate_mutants.sample(mutants, size=600, seed=7)
    for start in range(0, len(picked), 4):
        docs: list[Any] = [m.doc for m in picked[start : start + 4]]
        sources = [Source(f"m{n}.yaml", json.dumps(doc)) for n, doc in enumerate(docs)]
        report = engine.validate_sources(sources, target=Target(RELEASE))
        assert report.files == len(sources)
