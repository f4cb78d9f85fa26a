"""``dralet validate`` never crashes: random YAML and JSON documents of every kind it knows,
alone and in groups, get diagnostics or a clean verdict.

Documents are grown two ways: the corpus's objects (tests/cli/manifests) and a skeleton of
every DRA and workload kind in each served version, with random values put at random
places (any JSON value, or one of the API's own field names as a key, so that the checks
behind each field are reached); and documents that are random trees under a real
apiVersion and kind. Each group is validated in one run, at a random release, and the
exit status the CLI would give is 0 or 1 with at least one error diagnostic.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dralet.cli import main as cli_main
from dralet.validation import engine
from dralet.validation.diagnostics import Severity
from dralet.validation.documents import Source
from dralet.validation.targets import DRA_KINDS, WORKLOAD_KINDS, Target

CORPUS = Path(__file__).resolve().parent.parent / "cli" / "manifests"
RELEASES = ("1.32", "1.33", "1.34", "1.35", "1.36", "1.37", "1.38")
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")
EXAMPLES = 150
"""Kept small so the test stays fast; the corpus seeds reach deep rules anyway."""


def _corpus() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(CORPUS.iterdir()):
        if path.suffix not in {".yaml", ".yml", ".json"}:
            continue
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        docs.extend(d for d in loaded if isinstance(d, dict))
    return docs


def _skeletons() -> list[dict[str, Any]]:
    """A minimal object of every DRA kind in every resource.k8s.io version, and of every
    workload kind validate reads pod templates from."""
    out: list[dict[str, Any]] = []
    for kind in sorted({*DRA_KINDS, "DeviceTaintRule"}):
        for version in RESOURCE_VERSIONS:
            out.append(
                {
                    "apiVersion": f"resource.k8s.io/{version}",
                    "kind": kind,
                    "metadata": {"name": "x", "namespace": "default"},
                    "spec": {},
                }
            )
    for kind, known in sorted(WORKLOAD_KINDS.items()):
        out.append(
            {
                "apiVersion": known.api_version,
                "kind": kind,
                "metadata": {"name": "x"},
                "spec": {},
            }
        )
    out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
    return out


SEEDS = _corpus() + _skeletons()


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


FIELD_NAMES = sorted({k for seed in SEEDS for k in _keys(seed)})
"""Every key the seeds use: random objects built from them reach real fields."""

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "1Gi", "-1", "1e3", "0.5", "a.b", "x/y", "All", "Exists", "2**63"])
    | st.sampled_from(FIELD_NAMES)
)
keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*path, index))


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(list(_places(doc))))
        new = draw(values)
        if not path:
            if isinstance(new, dict):
                doc = {**doc, **new}
            continue
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = new
    return doc


@st.composite
def random_tree(draw: st.DrawFn) -> Any:
    seed = draw(st.sampled_from(SEEDS))
    body = draw(st.dictionaries(keys, values, max_size=5))
    return {"apiVersion": seed.get("apiVersion"), "kind": seed.get("kind"), **body}


documents = mutated() | random_tree() | values


def _text(docs: list[Any], as_json: bool) -> str:
    if as_json:
        if len(docs) == 1:
            return json.dumps(docs[0])
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    return yaml.safe_dump_all(docs)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    groups=st.lists(st.lists(documents, min_size=1, max_size=3), min_size=1, max_size=2),
    as_json=st.booleans(),
    release=st.sampled_from(RELEASES),
    lists=st.booleans(),
)
def test_validate_never_crashes(
    groups: list[list[Any]], as_json: bool, release: str, lists: bool
) -> None:
    sources = [
        Source(f"doc-{n}.{'json' if as_json else 'yaml'}", _text(docs, as_json))
        for n, docs in enumerate(groups)
    ]
    report = engine.validate_sources(sources, target=Target(release, list_type_attributes=lists))
    for diagnostic in report.diagnostics:
        assert diagnostic.message, diagnostic
        assert diagnostic.line >= 1 and diagnostic.column >= 1, diagnostic


@pytest.mark.parametrize(
    "docs",
    [
        pytest.param(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": "s"},
                    "spec": {
                        "driver": "gpu.example.com",
                        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                        "nodeName": "n",
                        "devices": [{"name": "d", "attributes": {"model": value}}],
                    },
                },
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": "c"},
                    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "x"'}}]},
                },
            ],
            id=f"attribute-{label}",
        )
        for label, value in (("null", None), ("string", "a"), ("list", [1]))
    ],
)
def test_a_slice_with_a_bad_attribute_beside_a_selector_is_refused_not_a_crash(
    docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(
        cli_main.cli, ["validate", "-k", "1.37", "-o", "json", str(path)], catch_exceptions=False
    )
    assert result.exit_code == 1, result.output
    found = json.loads(result.output)
    assert any(
        d["severity"] == Severity.ERROR.value and "attributes" in d["field"] for d in found
    ), found
