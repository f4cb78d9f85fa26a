"""``dralet validate`` against the real kube-apiserver: every object of validate's own
manifest corpus (tests/cli/manifests) is sent as a server-side dry-run create with strict
field validation, and the server's verdict must be validate's verdict (errors of the
schema and API rules; lint rules DRA1xx are beyond what a server checks).

Validation is judged at the newest release ``dralet validate`` knows; the server is 1.37.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dralet import kubenames
from dralet.validation.targets import SUPPORTED_KUBERNETES_VERSIONS
from tests.k8sapi import _KINDS, ClusterApi, ClusterApiError
from tests.kubefixtures import K8S_TIMEOUT

pytestmark = [pytest.mark.k8s, K8S_TIMEOUT]

CORPUS = Path(__file__).resolve().parent.parent / "cli" / "manifests"
TARGET = SUPPORTED_KUBERNETES_VERSIONS[-1]

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


def validate_verdicts(docs: list[dict[str, Any]], tmp_path: Path) -> list[list[str]]:
    """Each document's errors from one ``dralet validate`` run over one file per document."""
    paths = []
    for number, doc in enumerate(docs):
        path = tmp_path / f"doc-{number:04d}.yaml"
        path.write_text(yaml.safe_dump(doc))
        paths.append(path)
    out = subprocess.run(
        [sys.executable, "-m", "dralet.cli.main", "validate", "-k", TARGET, "-o", "json"]
        + [str(p) for p in paths],
        capture_output=True,
        text=True,
        check=False,
    )
    errors: dict[str, list[str]] = {str(p): [] for p in paths}
    for d in json.loads(out.stdout or "[]"):
        if d["severity"] == "error" and not str(d["id"]).startswith("DRA1"):
            errors[d["file"]].append(f"{d['id']} {d['message']}")
    return [errors[str(p)] for p in paths]


def server_verdict(api: ClusterApi, doc: dict[str, Any]) -> list[str]:
    kind = str(doc["kind"])
    namespace = None
    if _KINDS[kind][2]:
        namespace = (doc.get("metadata") or {}).get("namespace") or "default"
        problem = kubenames.dns_label_problem(namespace)
        if problem is not None:  # no such namespace can exist: the server cannot hold it
            return [f"metadata.namespace: {problem}"]
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
        return [f"{c.get('field')}: {c.get('message')}" for c in causes] or [str(error)]
    return []


def test_validate_agrees_with_the_server_on_every_corpus_object(
    k8s_api: ClusterApi, tmp_path: Path
) -> None:
    disagreements = []
    seen_known = set()
    corpus = documents()
    verdicts = validate_verdicts([doc for _, _, doc in corpus], tmp_path)
    for (name, index, doc), mine in zip(corpus, verdicts, strict=True):
        server = server_verdict(k8s_api, doc)
        if bool(mine) == bool(server):
            continue
        if (name, index) in KNOWN_DIFFERENCES:
            seen_known.add((name, index))
            continue
        disagreements.append(
            f"{name}#{index}: validate {mine or 'accepts'}, server {server or 'accepts'}"
        )
    refused = sum(bool(v) for v in verdicts)
    print(
        f"\nvalidate -k {TARGET} vs kube-apiserver 1.37: {len(corpus) - len(disagreements)} of "
        f"{len(corpus)} corpus objects agree ({refused} refused by validate)"
    )
    assert disagreements == []
    assert seen_known == set(KNOWN_DIFFERENCES), "a known difference is gone: drop it from the list"
