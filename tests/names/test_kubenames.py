"""The one copy of the Kubernetes name rules, as the node, the publisher and validate use it."""

import pytest

from dralet import kubenames


@pytest.mark.parametrize(
    ("uid", "expected"),
    [
        ("0b5e8f2a-6c1d-4e3f-9a7b-1c2d3e4f5a6b", None),
        ("0B5E8F2A-6C1D-4E3F-9A7B-1C2D3E4F5A6B", "is not in canonical form: UIDs are lower-case"),
        ("", "must not be empty"),
        ("../../etc/passwd", "is not a UUID"),
        ("0b5e8f2a6c1d4e3f9a7b1c2d3e4f5a6b", "is not a UUID"),
    ],
)
def test_uid_rule(uid: str, expected: str | None) -> None:
    assert kubenames.uid_problem(uid) == expected


def test_label_and_subdomain_limits_differ() -> None:
    assert kubenames.dns_label_problem("a" * 63) is None
    assert kubenames.dns_label_problem("a" * 64) is not None
    assert kubenames.dns_label_problem("a.b") is not None
    assert kubenames.dns_subdomain_problem("a.b") is None
    assert kubenames.dns_subdomain_problem("a" * 254) is not None


@pytest.mark.parametrize("name", ["a.example.com/b/c", "a/b/c", "x.io/y/z/w"])
def test_more_than_one_slash_is_refused_from_1_38_only(name: str) -> None:
    # k8s.io/kubernetes@v1.38.0-beta.0 pkg/apis/resource/validation validateQualifiedName
    assert kubenames.qualified_name_problem(name) is None  # 1.37 and older accepted it
    assert (
        kubenames.qualified_name_problem(name, single_slash=True)
        == "must not contain more than one slash"
    )


def test_one_slash_names_are_judged_alike_before_and_from_1_38() -> None:
    for name in ("model", "gpu.example.com/model", "gpu.example.com/9lives", "/model"):
        assert kubenames.qualified_name_problem(name) == kubenames.qualified_name_problem(
            name, single_slash=True
        )


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("gpu.example.com/model", True),
        ("model", False),
        ("other.example.com/model", False),
        ("sub.gpu.example.com/model", False),  # only the driver's own name, exactly
        ("example.com/model", False),
    ],
)
def test_own_domain_names_are_refused_for_that_driver_only(name: str, refused: bool) -> None:
    problem = kubenames.own_domain_problem(name, driver="gpu.example.com")
    assert (problem is not None) == refused
    if refused:
        assert (
            problem == "use the unqualified 'model': the driver name 'gpu.example.com' is implied"
        )
