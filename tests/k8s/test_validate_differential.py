"""``dralet validate`` against the real kube-apiserver: every object of validate's own
manifest corpus (tests/cli/manifests), and mutants of the valid ones that
tests/k8s/validate_mutants.py grows from the OpenAPI schemas, is sent as a server-side
dry-run create with strict field validation. The
server's verdict must be validate's verdict (errors of the schema and API rules; lint
rules DRA1xx are beyond what a server checks), and where both refuse, validate must name
a field the server names.

Each release CI builds (k8s/releases) is a run of its own: validation is judged at the
cluster's own release (``validate -k 1.38`` against kube-apiserver 1.38), whose server runs with
every DRA gate on (tests/k8scluster.py), so validate runs with the one gate it takes,
DRAListTypeAttributes, on as well.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet import kubenames
from dralet.validation import engine
from dralet.validation.documents import Source
from dralet.validation.targets import Target
from tests.k8s import validate_mutants
from tests.k8sapi import _KINDS, ClusterApi, ClusterApiError
from tests.k8scluster import Cluster, Release
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, pytest.mark.every_k8s_release, K8S_TIMEOUT]

CORPUS = Path(__file__).resolve().parent.parent / "cli" / "manifests"
GATES = ["--feature-gate", "DRAListTypeAttributes=true"]

# (file, document index): why validate and the server disagree. Each is a finding.
KNOWN_DIFFERENCES: dict[tuple[str, int], str] = {}


def documents() -> list[tuple[str, int, dict[str, Any]]]:
    found = []
    for path in sorted(CORPUS.iterdir()):
        if path.suffix not in {".yaml", ".yml", ".json"}:
            continue
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # unparseable: nothing a server could be sent
        for index, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("kind") in _KINDS:
                found.append((path.name, index, doc))
    return found


SERVER_LINTS = frozenset({"DRA102"})
"""Lint-numbered rules the server enforces too: a container naming a claim the pod lacks
(k8s.io/kubernetes v1.37.2 pkg/apis/core/validation/validation.go
validateResourceClaimNames)."""


def _server_rule(rule: str) -> bool:
    """Whether a rule is one the server judges: not a lint rule (DRA1xx), unless listed."""
    return not rule.startswith("DRA1") or rule in SERVER_LINTS


Verdict = list[tuple[str, str]]
"""(field, message) of each error; an empty list accepts."""


def validate_verdicts(docs: list[dict[str, Any]], tmp_path: Path, target: str) -> list[Verdict]:
    """Each document's errors from one ``dralet validate`` run over one file per document."""
    paths = []
    for number, doc in enumerate(docs):
        path = tmp_path / f"doc-{number:04d}.yaml"
        path.write_text(yaml.safe_dump(doc))
        paths.append(path)
    out = subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "validate", "-k", target, *GATES, "-o", "json"]
        + [str(p) for p in paths],
        capture_output=True,
        text=True,
        check=False,
    )
    errors: dict[str, Verdict] = {str(p): [] for p in paths}
    for d in json.loads(out.stdout or "[]"):
        if d["severity"] == "error" and _server_rule(str(d["id"])):
            errors[d["file"]].append((d["field"], f"{d['id']} {d['message']}"))
    return [errors[str(p)] for p in paths]


def validate_in_process(doc: dict[str, Any], target: str) -> Verdict:
    report = engine.validate_sources(
        [Source("mutant.yaml", yaml.safe_dump(doc))],
        target=Target(target, list_type_attributes=True),
    )
    return [
        (d.field, f"{d.rule} {d.message}")
        for d in report.diagnostics
        if d.severity.value == "error" and _server_rule(d.rule)
    ]


_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
_GO_FIELD = re.compile(r"Go struct field \w+\.([\w.]+) of type")


def _message_fields(message: str) -> list[str]:
    """Fields named only in the message of a decoding error (no causes): strict decoding
    names the unknown field; a type mismatch names the Go struct path, without indexes and
    with the names of embedded Go types (``spec.config.DeviceConfiguration.opaque``)."""
    go_paths = [
        ".".join(part for part in path.split(".") if not part[:1].isupper())
        for path in _GO_FIELD.findall(message)
    ]
    return _UNKNOWN_FIELD.findall(message) + go_paths


def server_verdict(api: ClusterApi, doc: dict[str, Any], *, dry_run: bool = True) -> Verdict:
    kind = str(doc["kind"])
    namespace = None
    if _KINDS[kind][2]:
        meta = doc.get("metadata")
        namespace = (meta.get("namespace") if isinstance(meta, dict) else None) or "default"
        problem = kubenames.dns_label_problem(namespace)
        if problem is not None:  # no such namespace can exist: the server cannot hold it
            return [("metadata.namespace", problem)]
        api.ensure_namespace(namespace)
        api.wait_for_default_service_account(namespace)
    version = str(doc.get("apiVersion", "")).rpartition("/")[2]
    query = {"fieldValidation": "Strict"}
    if dry_run:
        query["dryRun"] = "All"
    try:
        api.request("POST", api.path(kind, namespace=namespace, version=version), doc, query=query)
    except ClusterApiError as error:
        causes = (error.status.get("details") or {}).get("causes") or []
        if causes:
            return [(str(c.get("field", "")), str(c.get("message"))) for c in causes]
        message = str(error.status.get("message", error))
        return [(field, message) for field in _message_fields(message)] or [("", message)]
    return []


NAMESPACE_GONE_WITHIN = 60.0
"""How long an earlier test's namespace of the same name may take to finish terminating."""


def _await_gone(api: ClusterApi, name: str) -> None:
    deadline = time.monotonic() + NAMESPACE_GONE_WITHIN
    while (found := api.get("Namespace", name)) is not None:
        if not found["metadata"].get("deletionTimestamp"):
            api.delete("Namespace", name)
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name} is still terminating")
        time.sleep(0.2)


def create_namespaces(
    api: ClusterApi, corpus: list[tuple[str, int, dict[str, Any]]]
) -> dict[tuple[str, int], Verdict]:
    """The corpus's Namespace objects, created for real with their labels before any object
    in them is sent (admission reads a namespace's labels for adminAccess): each one's
    verdict is that of its create, as a dry run after it would only answer AlreadyExists."""
    verdicts = {}
    for name, index, doc in corpus:
        if doc.get("kind") != "Namespace":
            continue
        made = (doc.get("metadata") or {}).get("name")
        if isinstance(made, str) and made:
            _await_gone(api, made)
        verdicts[name, index] = server_verdict(api, doc, dry_run=False)
        if not verdicts[name, index] and isinstance(made, str):
            api.note_namespace(made)
    return verdicts


def _unindexed(field: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", field)


def _keys_dotted(field: str) -> str:
    """Strict decoding names a map key as a field (``attributes.numa``), validation in
    brackets (``attributes[numa]``)."""
    return re.sub(r"\[([^\]0-9][^\]]*)\]", r".\1", field)


def _v1_shaped(field: str) -> str:
    """The server checks an object after converting it to its internal, v1-shaped type and
    names fields in that shape: a v1beta1 request's ``count`` is ``requests[0].exactly.count``
    there, a v1beta1 device's ``basic.attributes`` plain ``attributes``. validate names the
    field as the file spells it; both are compared without those steps."""
    return field.replace(".exactly.", ".").replace(".basic.", ".")


def same_field(mine: Verdict, server: Verdict) -> bool:
    """Whether validate names a field the server names. A decoding error's Go path has no
    indexes; the server names some problems by the field that holds them (``metadata.labels``
    for a bad key, validate ``metadata.labels[Bad Key]``) and a missing object by its first
    required field (``spec.pool.name``, validate ``spec.pool``): so a field matches its server
    twin, or one inside the other below the top level."""
    theirs = {_v1_shaped(f) for f, _ in server if f}
    if not theirs:
        return True  # the server named no field (e.g. a request it could not decode)
    for field in (_v1_shaped(f) for f, _ in mine):
        for other in theirs:
            if field == other or _unindexed(field) == _unindexed(other):
                return True
            if _keys_dotted(field) == _keys_dotted(other):
                return True
            inner, outer = (field, other) if len(field) > len(other) else (other, field)
            if "." in outer and inner.startswith(outer) and inner[len(outer)] in ".[":
                return True
    return False


def test_validate_agrees_with_the_server_on_every_corpus_object(
    k8s_api: ClusterApi, k8s_release: Release, tmp_path: Path
) -> None:
    target = k8s_release.minor
    disagreements = []
    seen_known = set()
    corpus = documents()
    verdicts = validate_verdicts([doc for _, _, doc in corpus], tmp_path, target)
    namespaces = create_namespaces(k8s_api, corpus)
    for (name, index, doc), mine in zip(corpus, verdicts, strict=True):
        server = namespaces.get((name, index))
        if server is None:
            server = server_verdict(k8s_api, doc)
        if bool(mine) == bool(server) and same_field(mine, server):
            continue
        if (name, index) in KNOWN_DIFFERENCES:
            seen_known.add((name, index))
            continue
        disagreements.append(
            f"{name}#{index}: validate {mine or 'accepts'}, server {server or 'accepts'}"
        )
    refused = sum(bool(v) for v in verdicts)
    print(
        f"\nvalidate -k {target} vs kube-apiserver {k8s_release}: "
        f"{len(corpus) - len(disagreements)} of "
        f"{len(corpus)} corpus objects agree ({refused} refused by validate)"
    )
    assert disagreements == [], "\n".join(disagreements)
    assert seen_known == set(KNOWN_DIFFERENCES), "a known difference is gone: drop it from the list"


# --- generated mutants of the valid corpus objects ----------------------------------

MUTATED_KINDS = {
    "ResourceClaim",
    "ResourceClaimTemplate",
    "DeviceClass",
    "ResourceSlice",
    "DeviceTaintRule",
    "Pod",
    "Deployment",
}
MUTANTS_ENV = "DRALET_VALIDATE_MUTANTS"
"""How many mutants a run sends per release: a number, or ``all`` (make validate-differential)."""
MUTANTS_IN_CI = 1200
"""Every (kind, class) of mutant at least once, then more of each, a few minutes a release."""
MUTANTS_SEED = 45
K8S_TIMEOUT_SECONDS = 300
"""A CI run's limit; a run that names its own number of mutants has none."""


def mutation_seeds(target: str) -> list[dict[str, Any]]:
    """The corpus objects of the mutated kinds (every resource.k8s.io version the target
    serves) that validate accepts as they are at ``target``."""
    return [
        doc
        for name, _, doc in documents()
        if name.startswith("valid")
        and doc.get("kind") in MUTATED_KINDS
        and not validate_in_process(doc, target)
    ]


def chosen_mutants(
    target: str,
) -> tuple[list[validate_mutants.Mutant], list[validate_mutants.Mutant]]:
    """The mutants of this run, and every mutant the generator made."""
    every = list(validate_mutants.all_mutants(mutation_seeds(target), release=target))
    wanted = os.environ.get(MUTANTS_ENV, str(MUTANTS_IN_CI))
    if wanted == "all":
        return every, every
    return validate_mutants.sample(every, size=int(wanted), seed=MUTANTS_SEED), every


_ALPHA_FIELDS = (
    "validate follows the release's default gates, under which the server drops this alpha "
    "field on create (k8s.io/kubernetes v1.37.2 pkg/registry/resource/*/strategy.go "
    "dropDisabled*Fields); the test cluster turns every DRA gate on, so it checks the field"
)
# (regular expression matching a mutant's label): why validate and the server disagree.
KNOWN_MUTANT_DIFFERENCES: dict[str, str] = {
    r"\.derivedAttributes\b": f"DRADerivedAttributes: {_ALPHA_FIELDS}",
    r"\.compatibilityGroups\b": f"DRADeviceCompatibilityGroups: {_ALPHA_FIELDS}",
    r"\.nodeAllocatableResources\b": f"DRANodeAllocatableResources: {_ALPHA_FIELDS}",
    r"\.skipNodeOperations\b": f"DRAOptionalNodeOperations: {_ALPHA_FIELDS}",
    r"\.partitionTypeAttribute\b": f"DRAPartitionableDevicesType (1.38): {_ALPHA_FIELDS}",
    r"\.adminAccess: add\b": (
        "admin access is judged by the namespace's label, which validate sees only when the "
        "Namespace is in its input; here it is not, and validate warns (DRA110)"
    ),
    r"Pod/\S+ spec\.resources\.claims: add, then": (
        "the pod-level resources added around the claims carry limits and requests named "
        "'a', and validate does not judge pod resource names (outside DRA)"
    ),
    r"\.validRange\.step: ": (
        "what a range's step must satisfy (a multiple fitting min, max and the default, "
        "fractions under DRAFractionalCapacityRange) is not checked yet"
    ),
}


@pytest.mark.timeout(0 if os.environ.get(MUTANTS_ENV) else K8S_TIMEOUT_SECONDS)
def test_validate_agrees_with_the_server_on_generated_mutants(k8s_cluster: Cluster) -> None:
    api = ClusterApi(k8s_cluster)
    target = k8s_cluster.release.minor
    mutants, every = chosen_mutants(target)
    assert len(mutation_seeds(target)) >= 5, "the corpus lost its valid objects"
    known_patterns = {re.compile(p): p for p in KNOWN_MUTANT_DIFFERENCES}
    create_namespaces(api, documents())  # the labelled adminAccess seed's namespace
    disagreements: list[str] = []
    known: set[str] = set()
    tally: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    classes: dict[str, set[str]] = {}
    try:
        for mutant in mutants:
            mine = validate_in_process(mutant.doc, target)
            server = server_verdict(api, mutant.doc)
            by_kind[mutant.kind] += 1
            classes.setdefault(mutant.kind, set()).add(validate_mutants.operator_class(mutant))
            tally["refused by the server" if server else "accepted by the server"] += 1
            if bool(mine) == bool(server) and same_field(mine, server):
                tally["agree"] += 1
                continue
            matched = [p for rx, p in known_patterns.items() if rx.search(mutant.label)]
            if matched:
                known.update(matched)
                tally["known differences"] += 1
                continue
            disagreements.append(
                f"{mutant.label}: validate {mine or 'accepts'}, server {server or 'accepts'}"
            )
    finally:
        api.reset()
    print(
        f"\nvalidate -k {target} vs kube-apiserver {k8s_cluster.release}: {len(mutants)} of "
        f"{len(every)} generated mutants sent; "
        + ", ".join(f"{n} {what}" for what, n in sorted(tally.items()))
        + "\nby kind: "
        + ", ".join(
            f"{kind} {n} mutants in {len(classes[kind])} classes"
            for kind, n in sorted(by_kind.items())
        )
    )
    assert disagreements == [], f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements)
    stale = [p for p in KNOWN_MUTANT_DIFFERENCES if not any(re.search(p, m.label) for m in every)]
    assert stale == [], "a known difference matches no mutant any more: drop it"
    if len(mutants) == len(every):  # every mutant sent: each known difference must still show
        assert known == set(KNOWN_MUTANT_DIFFERENCES), "a known difference is gone: drop it"
