"""Rendering deploy/ with ``kubectl kustomize`` and strict Kubernetes schemas per version.

The schemas are kubernetes-validate's bundled ``-strict`` OpenAPI conversions (unknown
fields are errors). One validator is built per (Kubernetes version, apiVersion, kind)
and reused: building one is the expensive part, validating a document is cheap, and
``iter_errors`` reports every problem at once.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBECTL = "kubectl"
RENDER_TIMEOUT_S = 60

Document = dict[str, Any]


class SchemaNotFoundError(LookupError):
    """The Kubernetes version serves no such apiVersion/kind."""


def _schema_dir(version: str) -> importlib.resources.abc.Traversable:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = root / f"v{version}.0-local-strict"
    if not folder.is_dir():
        raise LookupError(f"kubernetes-validate bundles no schemas for {version}")
    return folder


@functools.cache
def _definitions(version: str) -> referencing.Resource[Any]:
    contents = json.loads((_schema_dir(version) / "_definitions.json").read_text())
    return referencing.Resource.from_contents(contents)


@functools.cache
def validator_for(version: str, api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    """The strict validator of ``kind`` in ``api_version`` for Kubernetes ``version``."""
    # rbac.authorization.k8s.io/v1 -> rbac-v1; v1 -> v1 (kubernetes-validate's names).
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _schema_dir(version) / f"{kind.lower()}-{group_version}.json"
    if not path.is_file():
        raise SchemaNotFoundError(f"Kubernetes {version} has no {api_version} {kind}")
    resource = referencing.Resource.from_contents(json.loads(path.read_text()))
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        [(resource.id() or path.name, resource)]
    )
    registry = _definitions(version) @ registry
    return jsonschema.Draft202012Validator(resource.contents, registry=registry)


def schema_errors(document: Mapping[str, Any], version: str) -> list[str]:
    """Every strict-schema error of ``document`` for Kubernetes ``version``."""
    validator = validator_for(version, str(document["apiVersion"]), str(document["kind"]))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


@functools.cache
def _render(target: str) -> tuple[Document, ...]:
    completed = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY / target)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return tuple(d for d in yaml.safe_load_all(completed.stdout) if d)


@pytest.fixture(scope="session")
def render() -> Callable[[str], tuple[Document, ...]]:
    """``render("overlays/k8s-1.34")``: the objects ``kubectl kustomize`` produces."""
    if shutil.which(KUBECTL) is None:
        pytest.skip("kubectl (for `kubectl kustomize`) is not installed")
    return _render


@pytest.fixture(scope="session")
def strict_schema_errors() -> Callable[[Mapping[str, Any], str], list[str]]:
    """``strict_schema_errors(document, "1.32")``: [] when valid; raises
    ``SchemaNotFoundError`` when that Kubernetes version serves no such kind."""
    return schema_errors
