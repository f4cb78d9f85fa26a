"""Strict schema validation: lazily built, cached validators that report every error."""

from __future__ import annotations

from typing import Any

from dralet.validation import schemas
from dralet.validation.targets import Target

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1beta1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [{"name": "gpu", "count": "two", "extra": 1}]}},
}


def test_one_validator_per_version_and_kind_is_reused() -> None:
    first = schemas.validator_for("1.32", "resource.k8s.io/v1beta1", "ResourceClaim")
    assert first is not None
    assert schemas.validator_for("1.32", "resource.k8s.io/v1beta1", "ResourceClaim") is first


def test_all_errors_are_reported() -> None:
    validator = schemas.validator_for("1.32", "resource.k8s.io/v1beta1", "ResourceClaim")
    assert validator is not None
    findings = schemas.schema_findings(validator, CLAIM, api_version="resource.k8s.io/v1beta1")
    assert sorted(f.path for f in findings) == [
        ("spec", "devices", "requests", 0, "count"),
        ("spec", "devices", "requests", 0, "deviceClassName"),
        ("spec", "devices", "requests", 0, "extra"),
    ]


def test_a_missing_schema_is_none_not_a_pass() -> None:
    assert schemas.validator_for("1.32", "resource.k8s.io/v1", "ResourceClaim") is None
    # core/v1 has a ResourceClaim type too (container claims), but it is not a kind.
    assert schemas.validator_for("1.34", "v1", "ResourceClaim") is None


def test_served_versions_per_release() -> None:
    assert Target("1.32").served_resource_versions == ("v1beta1",)
    assert Target("1.33").served_resource_versions == ("v1beta1", "v1beta2")
    assert Target("1.35").served_resource_versions == ("v1beta1", "v1beta2", "v1")
    assert Target("1.32").shape("resource.k8s.io/v1alpha3") is None
