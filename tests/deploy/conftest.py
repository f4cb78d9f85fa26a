"""Rendering the Helm chart with ``helm template`` and strict Kubernetes schemas per version.

The chart (deploy/chart/dralet) is the one source of every manifest. ``helm`` is the
binary ``make helm`` builds (``$DRALET_HELM`` when it exists, else the newest under
``${XDG_CACHE_HOME:-~/.cache}/dralet/helm/``, else one on ``$PATH``); without it these
tests skip, except under ``CI=true``, where they fail.

The schemas are kubernetes-validate's bundled ``-strict`` OpenAPI conversions (unknown
fields are errors). One validator is built per (Kubernetes version, apiVersion, kind)
and reused: building one is the expensive part, validating a document is cheap, and
``iter_errors`` reports every problem at once.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

from dralet.validation import schemas

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "chart" / "dralet"
RELEASE = "dralet"
NAMESPACE = "dralet"
HELM_TIMEOUT_S = 60
KUBERNETES_VERSIONS = ("1.32", "1.33", "1.34", "1.35", "1.36", "1.37", "1.38")
"""Every Kubernetes version the chart supports: the floor to the current release."""

Document = dict[str, Any]
Settings = tuple[tuple[str, str], ...]


class SchemaNotFoundError(LookupError):
    """The Kubernetes version serves no such apiVersion/kind."""


class RenderError(Exception):
    """``helm template`` refused the values; the message is helm's."""


def _cached_helms() -> list[Path]:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    found = [p for p in (cache / "dralet" / "helm").glob("*/helm") if os.access(p, os.X_OK)]

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.parent.name))

    return sorted(found, key=version, reverse=True)


def find_helm() -> str | None:
    """The helm binary to use, or None."""
    given = os.environ.get("DRALET_HELM")
    if given and os.access(given, os.X_OK):
        return given
    cached = _cached_helms()
    if cached:
        return str(cached[0])
    return shutil.which("helm")


@functools.cache
def helm_binary() -> str:
    """The helm binary; skips (fails under CI=true) when there is none."""
    helm = find_helm()
    if helm is None:
        reason = "helm is not installed: `make helm` builds it"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return helm


@functools.cache
def _helm_home() -> dict[str, str]:
    """Private Helm config, cache and data dirs: tests never read or touch the user's."""
    home = Path(tempfile.mkdtemp(prefix="dralet-helm-"))
    return {f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CONFIG", "CACHE", "DATA")}


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args],
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT_S,
        check=False,
        env={**os.environ, **_helm_home()},
    )


def set_args(settings: Settings) -> list[str]:
    return [arg for name, value in settings for arg in ("--set", f"{name}={value}")]


@functools.cache
def render_chart(
    kube_version: str, settings: Settings = (), values: tuple[Path, ...] = ()
) -> tuple[Document, ...]:
    """The objects ``helm template`` makes for a cluster of ``kube_version`` (with the
    ``values`` files, then the ``settings``)."""
    completed = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        f"{kube_version}.0",
        *(arg for path in values for arg in ("--values", str(path))),
        *set_args(settings),
    )
    if completed.returncode != 0:
        raise RenderError(completed.stderr.strip())
    return tuple(d for d in yaml.safe_load_all(completed.stdout) if d)


def _schema_dir(version: str) -> importlib.resources.abc.Traversable:
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    # A release newer than the bundled schemas is checked with the newest older ones, as
    # `dralet validate` does (1.38 changed no field of the kinds the chart renders).
    folder = root / f"v{schemas.schema_release(version)}.0-local-strict"
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


def objects_schema_errors(documents: tuple[Document, ...], version: str) -> dict[str, list[str]]:
    """``kind/name`` → its strict-schema errors, for every rendered object."""
    return {f"{d['kind']}/{d['metadata']['name']}": schema_errors(d, version) for d in documents}


def only(documents: tuple[Document, ...], kind: str) -> Document:
    """The one rendered object of ``kind``."""
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


Render = Callable[..., tuple[Document, ...]]


@pytest.fixture(scope="session")
def render() -> Render:
    """``render("1.34", (("driverName", "x.example.org"),))``: the chart's objects."""
    helm_binary()
    return render_chart


@pytest.fixture(scope="session")
def helm() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``helm("lint", ...)``: run the helm binary."""
    helm_binary()
    return run_helm


@pytest.fixture(scope="session")
def strict_schema_errors() -> Callable[[Mapping[str, Any], str], list[str]]:
    """``strict_schema_errors(document, "1.32")``: [] when valid; raises
    ``SchemaNotFoundError`` when that Kubernetes version serves no such kind."""
    return schema_errors
