"""The Kubernetes name rules, written once: DNS labels and subdomains, driver and pool
names, qualified attribute names and object UIDs.

Used by the node (the kubelet's claim references), the publisher (what a slice may hold)
and ``dralet validate``. Each function returns the reason a value is invalid, or ``None``
when it is valid, worded like the API server's own messages.
"""

from __future__ import annotations

import re

__all__ = [
    "ATTRIBUTE_ID_MAX_LENGTH",
    "DNS_LABEL_MAX_LENGTH",
    "DNS_SUBDOMAIN_MAX_LENGTH",
    "DRIVER_NAME_MAX_LENGTH",
    "POOL_NAME_MAX_LENGTH",
    "dns_label_problem",
    "dns_subdomain_problem",
    "driver_name_problem",
    "pool_name_problem",
    "qualified_name_problem",
    "uid_problem",
]

DNS_LABEL_MAX_LENGTH = 63
DNS_SUBDOMAIN_MAX_LENGTH = 253
DRIVER_NAME_MAX_LENGTH = 63
"""Driver names follow the CSI driver name rule (``DeviceMaxDomainLength``)."""
POOL_NAME_MAX_LENGTH = 253
ATTRIBUTE_ID_MAX_LENGTH = 32
"""``DeviceMaxIDLength``: the part of a qualified name after the domain."""

_DOMAIN_AND_ID = 2
"""A qualified name with a domain has two '/'-separated parts."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""The canonical (lower-case) form the API server gives every object UID."""


def dns_label_problem(value: str) -> str | None:
    """An RFC 1123 label: what request, device and counter set names must be."""
    if len(value) > DNS_LABEL_MAX_LENGTH:
        return f"must be no more than {DNS_LABEL_MAX_LENGTH} characters"
    if _DNS_LABEL.fullmatch(value) is None:
        return (
            "must be a DNS label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def dns_subdomain_problem(value: str) -> str | None:
    """An RFC 1123 subdomain: what object, class and pool segment names must be."""
    if len(value) > DNS_SUBDOMAIN_MAX_LENGTH:
        return f"must be no more than {DNS_SUBDOMAIN_MAX_LENGTH} characters"
    if _DNS_SUBDOMAIN.fullmatch(value) is None:
        return (
            "must be a DNS subdomain: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def driver_name_problem(value: str) -> str | None:
    """The CSI driver name rule: at most 63 characters, a DNS subdomain once lower-cased."""
    if not value:
        return "a driver name is required"
    if len(value) > DRIVER_NAME_MAX_LENGTH:
        return f"must be no more than {DRIVER_NAME_MAX_LENGTH} characters"
    if _DNS_SUBDOMAIN.fullmatch(value.lower()) is None:
        return (
            "must be a DNS subdomain (after lower-casing): letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def pool_name_problem(value: str) -> str | None:
    """At most 253 characters; every '/'-separated segment a DNS subdomain."""
    if not value:
        return "a pool name is required"
    if len(value) > POOL_NAME_MAX_LENGTH:
        return f"must be no more than {POOL_NAME_MAX_LENGTH} characters"
    for segment in value.split("/"):
        problem = dns_subdomain_problem(segment)
        if problem is not None:
            return f"segment {segment!r}: {problem}"
    return None


def _identifier_problem(identifier: str) -> str | None:
    if not identifier:
        return "the name after the domain must not be empty"
    if len(identifier) > ATTRIBUTE_ID_MAX_LENGTH:
        return f"{identifier!r} must be no more than {ATTRIBUTE_ID_MAX_LENGTH} characters"
    if _C_IDENTIFIER.fullmatch(identifier) is None:
        return (
            f"{identifier!r} must be a C identifier: letters, digits and '_', "
            "not starting with a digit"
        )
    return None


def qualified_name_problem(value: str, *, require_domain: bool = False) -> str | None:
    """An attribute or capacity name: ``id`` or ``domain/id`` (id a C identifier, ≤32).

    Like the API server, three or more '/'-separated parts are not rejected.
    """
    parts = value.split("/")
    if len(parts) == 1:
        if require_domain:
            return "must include a domain"
        return _identifier_problem(value)
    if len(parts) == _DOMAIN_AND_ID:
        domain, identifier = parts
        if not domain:
            return "the domain must not be empty"
        problem = driver_name_problem(domain)
        if problem is not None:
            return f"domain {domain!r}: {problem}"
        return _identifier_problem(identifier)
    return None


def uid_problem(value: str) -> str | None:
    """An object UID as the API server hands it out: a lower-case 8-4-4-4-12 UUID."""
    if not value:
        return "must not be empty"
    if _UID.fullmatch(value) is not None:
        return None
    if _UID.fullmatch(value.lower()) is not None:
        return "is not in canonical form: UIDs are lower-case"
    return "is not a UUID"
