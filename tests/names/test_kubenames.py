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
