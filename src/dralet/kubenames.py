"""The Kubernetes name rules, written once: DNS labels and subdomains, driver and pool
names, qualified attribute names, object UIDs, label keys and values, annotation keys and
their total size, and generateName prefixes.

Used by the node (the kubelet's claim references), the publisher (what a slice may hold)
and ``dralet validate``. Each function returns the reason a value is invalid, or ``None``
when it is valid, worded like the API server's own messages.
"""

from __future__ import annotations

import re

__all__ = [
    "ANNOTATIONS_TOTAL_MAX_BYTES",
    "ATTRIBUTE_ID_MAX_LENGTH",
    "ATTRIBUTE_VALUE_MAX_LENGTH",
    "DNS_LABEL_MAX_LENGTH",
    "DNS_SUBDOMAIN_MAX_LENGTH",
    "DRIVER_NAME_MAX_LENGTH",
    "LABEL_NAME_MAX_LENGTH",
    "LABEL_VALUE_MAX_LENGTH",
    "POOL_NAME_MAX_LENGTH",
    "SINGLE_SLASH_RELEASE",
    "annotation_key_problem",
    "annotations_size_problem",
    "dns_label_name_problem",
    "dns_label_problem",
    "dns_subdomain_name_problem",
    "dns_subdomain_problem",
    "driver_name_problem",
    "extended_resource_name_problem",
    "label_key_problem",
    "label_value_problem",
    "own_domain_problem",
    "pool_name_problem",
    "qualified_name_problem",
    "uid_problem",
]

DNS_LABEL_MAX_LENGTH = 63
"""The longest RFC 1123 label: a Kubernetes name segment, a qualified name's name part
(k8s.io/apimachinery util/validation ``DNS1123LabelMaxLength``)."""
DNS_SUBDOMAIN_MAX_LENGTH = 253
DRIVER_NAME_MAX_LENGTH = 63
"""Driver names follow the CSI driver name rule (``DeviceMaxDomainLength``)."""
POOL_NAME_MAX_LENGTH = 253
ATTRIBUTE_ID_MAX_LENGTH = 32
"""``DeviceMaxIDLength``: the part of a qualified name after the domain."""
ATTRIBUTE_VALUE_MAX_LENGTH = 64
"""The longest string or version attribute value (k8s.io/api@v0.37.2 resource/v1
types.go ``DeviceAttributeMaxValueLength``)."""

_DOMAIN_AND_ID = 2
"""A qualified name with a domain has two '/'-separated parts."""
SINGLE_SLASH_RELEASE = "1.38"
"""The first release whose API server refuses a qualified name with more than one '/'
(k8s.io/kubernetes@v1.38.0-beta.0 pkg/apis/resource/validation/validation.go
validateQualifiedName; CHANGELOG-1.38, kubernetes/kubernetes#141644)."""

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


def qualified_name_problem(
    value: str,
    *,
    require_domain: bool = False,
    single_slash: bool = False,
    lower_case_domain: bool = False,
) -> str | None:
    """An attribute or capacity name: ``id`` or ``domain/id`` (id a C identifier, ≤32).

    Three or more '/'-separated parts are refused with ``single_slash`` (what Kubernetes
    1.38 and later refuse, ``SINGLE_SLASH_RELEASE``); older servers accepted them. The
    domain is a driver name, checked lower-cased, unless ``lower_case_domain`` (where the
    server checks the field's format declaratively: a DNS subdomain as written).
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
        if lower_case_domain and domain != domain.lower():
            return f"domain {domain!r}: must be lower case (a DNS subdomain)"
        return _identifier_problem(identifier)
    if single_slash:
        return "must not contain more than one slash"
    return None


def own_domain_problem(value: str, *, driver: str) -> str | None:
    """An attribute or capacity name qualified with the publishing driver's own name.

    The kubelet-plugin helper refuses to publish ``<driver>/id`` for ``id`` (the driver
    name is the implied domain, and both forms on one device resolve ambiguously):
    k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 resourceslice/validation.go
    validateUnqualifiedName, on by default (kubeletplugin ValidateQualifiedNames).
    """
    domain, slash, identifier = value.partition("/")
    if slash and domain == driver:
        return f"use the unqualified {identifier!r}: the driver name {driver!r} is implied"
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


# --- object metadata: labels, annotations, generated names -------------------------------
# Facts from apimachinery's validation (IsQualifiedName, IsValidLabelValue,
# ValidateAnnotations, NameIsDNSSubdomain with prefix): a qualified key is an optional DNS
# subdomain prefix of at most 253 characters and a name of at most 63 characters of
# letters, digits, '-', '_' and '.', starting and ending with a letter or digit; a label
# value is empty or such a name; annotations may hold at most 256 KiB of keys and values.

LABEL_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63
ANNOTATIONS_TOTAL_MAX_BYTES = 256 * 1024
GENERATED_NAME_SUFFIX_LENGTH = 5
"""generateName appends five random characters; the prefix is checked with them in mind."""

_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _label_name_problem(name: str) -> str | None:
    if not name:
        return "name part must be non-empty"
    if len(name) > LABEL_NAME_MAX_LENGTH:
        return f"name part must be no more than {LABEL_NAME_MAX_LENGTH} characters"
    if _LABEL_NAME.fullmatch(name) is None:
        return (
            "name part must consist of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """A label or annotation key (``prefix/name`` or ``name``), as IsQualifiedName checks it."""
    prefix, slash, name = key.rpartition("/")
    if key.count("/") > 1:
        return (
            "a qualified name must consist of an optional DNS subdomain prefix and '/' "
            "followed by a name"
        )
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        problem = dns_subdomain_problem(prefix)
        if problem is not None:
            return f"prefix part {problem}"
    return _label_name_problem(name)


def label_value_problem(value: str) -> str | None:
    """A label value: empty, or at most 63 letters, digits, '-', '_', '.' (alphanumeric ends)."""
    if not value:
        return None
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        return f"must be no more than {LABEL_VALUE_MAX_LENGTH} characters"
    if _LABEL_NAME.fullmatch(value) is None:
        return (
            "a label value must be empty or consist of letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def annotation_key_problem(key: str) -> str | None:
    """Annotation keys are qualified names once lower-cased."""
    return label_key_problem(key.lower())


def annotations_size_problem(annotations: dict[str, str]) -> str | None:
    """The total size of keys and values, counted in bytes as the API server does."""
    total = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if total > ANNOTATIONS_TOTAL_MAX_BYTES:
        return f"may not be more than {ANNOTATIONS_TOTAL_MAX_BYTES} bytes (has {total})"
    return None


def dns_label_name_problem(value: str, *, prefix: bool = False) -> str | None:
    """An object name that must be a DNS label; ``prefix`` for a generateName."""
    return dns_label_problem(_as_generated(value) if prefix else value)


def dns_subdomain_name_problem(value: str, *, prefix: bool = False) -> str | None:
    """An object name that must be a DNS subdomain; ``prefix`` for a generateName."""
    return dns_subdomain_problem(_as_generated(value) if prefix else value)


def _as_generated(prefix: str) -> str:
    """A generateName prefix may end in '-' or '.': the random suffix follows it."""
    return prefix + "x" * GENERATED_NAME_SUFFIX_LENGTH if prefix else prefix


def extended_resource_name_problem(name: str) -> str | None:
    """A DeviceClass ``extendedResourceName`` (1.34+): an extended resource name as
    IsExtendedResourceName defines it: domain-prefixed, outside the ``kubernetes.io``
    domain, and ``requests.<name>`` a valid qualified name (it becomes a quota key)."""
    if "/" not in name or name.endswith("/"):
        return "must be a domain-prefixed name such as 'example.com/gpu'"
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for native resources"
    problem = label_key_problem("requests." + name)
    if problem is not None:
        return f"'requests.{name}' must be a qualified name: {problem}"
    return None
