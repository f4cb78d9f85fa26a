"""``dralet validate`` against the real kube-apiserver: every object of validate's own
manifest corpus (tests/cli/manifests), and mutations of the valid ones that hypothesis
generates, is sent as a server-side dry-run create with strict field validation. The
server's verdict must be validate's verdict (errors of the schema and API rules; lint
rules DRA1xx are beyond what a server checks), and where both refuse, validate must name
a field the server names.

Each release CI builds (k8s/releases) is a run of its own: validation is judged at the
cluster's own release (``validate -k 1.38`` against kube-apiserver 1.38), whose server runs with
every DRA gate on (tests/k8scluster.py), so validate runs with the one gate it takes,
DRAListTypeAttributes, on as well.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dralet import kubenames
from dralet.validation import engine
from dralet.validation.documents import Source
from dralet.validation.targets import Target
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
        if d["severity"] == "error" and not str(d["id"]).startswith("DRA1"):
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
        if d.severity.value == "error" and not d.rule.startswith("DRA1")
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


def server_verdict(api: ClusterApi, doc: dict[str, Any]) -> Verdict:
    kind = str(doc["kind"])
    namespace = None
    if _KINDS[kind][2]:
        namespace = (doc.get("metadata") or {}).get("namespace") or "default"
        problem = kubenames.dns_label_problem(namespace)
        if problem is not None:  # no such namespace can exist: the server cannot hold it
            return [("metadata.namespace", problem)]
        api.ensure_namespace(namespace)
        api.wait_for_default_service_account(namespace)
    version = str(doc.get("apiVersion", "")).rpartition("/")[2]
    try:
        api.request(
            "POST",
            api.path(kind, namespace=namespace, version=version),
            doc,
            query={"dryRun": "All", "fieldValidation": "Strict"},
        )
    except ClusterApiError as error:
        causes = (error.status.get("details") or {}).get("causes") or []
        if causes:
            return [(str(c.get("field", "")), str(c.get("message"))) for c in causes]
        message = str(error.status.get("message", error))
        return [(field, message) for field in _message_fields(message)] or [("", message)]
    return []


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
    for (name, index, doc), mine in zip(corpus, verdicts, strict=True):
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


# --- generated mutations of the valid corpus objects --------------------------------

MUTATED_KINDS = {"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice"}
BAD_STRINGS = (
    "",
    "Upper_Case",
    "-leading-dash",
    "a" * 64,
    "b" * 254,
    "dots..twice",
    "with space",
    "example.com/a=b",
    "1Gi",
    "All",
)
BAD_NUMBERS = (-1, 0, 2**31, 10**6)


def mutation_seeds(target: str) -> list[dict[str, Any]]:
    """The DRA objects of the corpus (every resource.k8s.io version the target serves) that
    validate accepts as they are at ``target``."""
    return [
        doc
        for name, _, doc in documents()
        if name.startswith("valid")
        and doc.get("kind") in MUTATED_KINDS
        and not validate_in_process(doc, target)
    ]


def places(
    value: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every (path, value) inside an object, the object itself left out."""
    if path and path[0] not in {"apiVersion", "kind"}:
        yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            if path != ("metadata",) or key != "namespace":  # the namespace is in the URL
                yield from places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from places(item, (*path, index))


def replacements(value: Any) -> list[tuple[str, Any]]:
    """What a mutation may put at a place holding ``value`` (``DELETE`` removes it)."""
    out: list[tuple[str, Any]] = [("delete", DELETE)]
    if isinstance(value, bool):
        out.append(("flip", not value))
    elif isinstance(value, int):
        out += [(f"number {n}", n) for n in BAD_NUMBERS]
    elif isinstance(value, str):
        out += [(f"string {s[:12]!r}", s) for s in BAD_STRINGS]
        out.append(("number for a string", 7))
    elif isinstance(value, list):
        out += [("empty list", [])]
        if value:
            out.append(("first item twice", [value[0], *value]))
            out.append(("33 copies", [copy.deepcopy(value[0]) for _ in range(33)]))
    elif isinstance(value, dict):
        out += [("empty object", {}), ("unknown field", {**value, "bogusField": 1})]
    return out


DELETE = object()


def mutate(doc: dict[str, Any], path: tuple[str | int, ...], new: Any) -> dict[str, Any]:
    mutant = copy.deepcopy(doc)
    parent: Any = mutant
    for part in path[:-1]:
        parent = parent[part]
    if new is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(new)
    return mutant


@st.composite
def mutants(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    seed = draw(st.sampled_from(seeds))
    path, value = draw(st.sampled_from(list(places(seed))))
    label, new = draw(st.sampled_from(replacements(value)))
    where = ".".join(str(p) for p in path)
    name = seed["metadata"].get("name") or seed["metadata"].get("generateName")
    version = seed["apiVersion"].rpartition("/")[2]
    return f"{version} {seed['kind']}/{name} {where}: {label}", mutate(seed, path, new)


# (mutation label as the test prints it): why validate and the server disagree.
KNOWN_MUTANT_DIFFERENCES: dict[str, str] = {}


def test_validate_agrees_with_the_server_on_generated_mutations(k8s_cluster: Cluster) -> None:
    api = ClusterApi(k8s_cluster)
    target = k8s_cluster.release.minor
    seeds = mutation_seeds(target)
    assert len(seeds) >= 5, "the corpus lost its valid v1 objects"

    @settings(
        max_examples=3000,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(mutants(seeds))
    def check(case: tuple[str, dict[str, Any]]) -> None:
        label, mutant = case
        if label in seen:
            return
        seen.add(label)
        mine = validate_in_process(mutant, target)
        server = server_verdict(api, mutant)
        tally["refused by the server" if server else "accepted by the server"] += 1
        if bool(mine) == bool(server) and same_field(mine, server):
            tally["agree"] += 1
            if any(f for f, _ in server):
                tally["refused at a field both name"] += 1
        elif label in KNOWN_MUTANT_DIFFERENCES:
            known.add(label)
        else:
            disagreements.append(
                f"{label}: validate {mine or 'accepts'}, server {server or 'accepts'}"
            )

    seen: set[str] = set()
    known: set[str] = set()
    disagreements: list[str] = []
    tally: Counter[str] = Counter()
    try:
        check()
    finally:
        api.reset()
    print(
        f"\nvalidate -k {target} vs kube-apiserver {k8s_cluster.release} on {len(seen)} "
        "distinct mutations: " + ", ".join(f"{n} {what}" for what, n in sorted(tally.items()))
    )
    assert disagreements == [], "\n".join(disagreements)
    assert known == set(KNOWN_MUTANT_DIFFERENCES), "a known difference is gone: drop it"
