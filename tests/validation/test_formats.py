"""The API server's name and value formats as dralet validate checks them."""

from __future__ import annotations

import pytest

from dralet import kubenames
from dralet.validation import formats


@pytest.mark.parametrize("name", ["gpu", "gpu-0", "0", "a" * 63])
def test_dns_labels_that_pass(name: str) -> None:
    assert kubenames.dns_label_problem(name) is None


@pytest.mark.parametrize("name", ["GPU", "gpu_0", "-gpu", "gpu-", "gpu.0", "a" * 64, ""])
def test_dns_labels_that_fail(name: str) -> None:
    assert kubenames.dns_label_problem(name) is not None


def test_driver_names_are_lower_cased_before_the_subdomain_check() -> None:
    assert kubenames.driver_name_problem("GPU.Example.com") is None
    assert kubenames.driver_name_problem("gpu_example.com") is not None
    assert kubenames.driver_name_problem("a" * 64) == "must be no more than 63 characters"


def test_pool_names_are_slash_separated_subdomains() -> None:
    assert kubenames.pool_name_problem("fabric/rack-1.zone") is None
    assert kubenames.pool_name_problem("fabric//rack") is not None
    assert kubenames.pool_name_problem("a" * 254) is not None


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("model", None),
        ("gpu.example.com/model", None),
        ("_private9", None),
        ("a/b/c", None),  # three parts: accepted, as by the API server
        (
            "9lives",
            "'9lives' must be a C identifier: letters, digits and '_', not starting with a digit",
        ),
        ("/model", "the domain must not be empty"),
        ("gpu.example.com/", "the name after the domain must not be empty"),
        ("x" * 33, f"{'x' * 33!r} must be no more than 32 characters"),
    ],
)
def test_qualified_names(name: str, problem: str | None) -> None:
    assert kubenames.qualified_name_problem(name) == problem


def test_match_attribute_needs_a_domain() -> None:
    assert kubenames.qualified_name_problem("numa", require_domain=True) == "must include a domain"
    assert kubenames.qualified_name_problem("gpu.example.com/numa", require_domain=True) is None


@pytest.mark.parametrize("version", ["1.2.3", "0.0.0-rc.1+build.5", "550.54.15"])
def test_strict_semver_passes(version: str) -> None:
    assert formats.semver_problem(version) is None


@pytest.mark.parametrize("version", ["v1.2.3", "1.2", "01.2.3", "1.2.3.4"])
def test_non_semver_fails(version: str) -> None:
    assert formats.semver_problem(version) is not None


def test_leading_v_gets_a_hint() -> None:
    assert formats.semver_problem("v1.2.3") == (
        "'v1.2.3' is not a semantic version (MAJOR.MINOR.PATCH) (drop the leading 'v')"
    )


@pytest.mark.parametrize("value", ["80Gi", "1.5", "500m", "1e3", "4", 4, 2.5])
def test_quantities_that_parse(value: object) -> None:
    assert formats.quantity_problem(value) is None


@pytest.mark.parametrize("value", [None, " 80Gi", "80Gi  ", "\t4\n"])
def test_null_and_spaces_decode_as_the_server_decodes_them(value: object) -> None:
    """null is the zero quantity, spaces around the text are trimmed."""
    assert formats.quantity_problem(value) is None


@pytest.mark.parametrize("value", ["lots", "80GB", "", "  ", True, "8 0Gi"])
def test_quantities_that_do_not(value: object) -> None:
    assert formats.quantity_problem(value) is not None
