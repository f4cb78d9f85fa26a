"""The compiled YAML reader answers only where it reads what PyYAML reads: for every
text it accepts, its documents equal PyYAML's safe loader's, and it hands every text
with YAML 1.1-only scalars, tags or ambiguous shapes to PyYAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dralet import yamltext

REPOSITORY = Path(__file__).resolve().parents[2]
MANIFESTS = sorted(
    p
    for folder in ("tests/cli/manifests", "deploy", "examples", "docs")
    if (REPOSITORY / folder).is_dir()
    for p in (REPOSITORY / folder).rglob("*.y*ml")
)


def pyyaml(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


def outcome(load: Any, text: str) -> Any:
    """The documents, or the fact that loading failed."""
    try:
        return load(text)
    except yaml.YAMLError:
        return "refused"


@pytest.mark.parametrize(
    "text",
    [
        "a: yes\n",
        "a: [on, off]\n",
        "yes: 1\n",
        "mode: 0777\n",
        "a: 0o17\n",
        "a: 1:30\n",
        "a: 1e3\n",
        "a: =\n",
        "<<: {a: 1}\n",
        "a: !!str 1\n",
        "a: !custom x\n",
        "? a\n: 1\n",
        "- 1\n- 2\n",
        "--- [1]\n",
        "a: 1\n---\n# c\n\n- 1\n",
        "%YAML 1.1\n---\na: 1\n",
        "a: 1\na: 2\n",
        "",
    ],
)
def test_texts_read_differently_or_ambiguously_are_left_to_pyyaml(text: str) -> None:
    assert yamltext.fast_documents(text) is None
    assert outcome(yamltext.load_all, text) == outcome(pyyaml, text)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\n---\nb: [x, {c: d}]\n",
        "a: 1\n---\n",
        "---\n# only a comment\n---\na: 1\n",
        "a: &x {b: 1}\nc: *x\n",
        "1: a\n2.5: b\nnull: c\n",
        "a: 12345678901234567890\n",
        "expression: device.attributes['x'].y != 'z'\n",
        "name: node-0007\nimage: registry/app:1.2.3\n",
        "a: 2001-12-14\n",
        "{a: 1}\n",
        "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  spec: {}\n",
        "# c\n---\nitems:\n- a\n---\nb: 1\n",
    ],
)
def test_plain_texts_are_read_fast_and_the_same(text: str) -> None:
    fast = yamltext.fast_documents(text)
    assert fast is not None
    assert fast == pyyaml(text)


@pytest.mark.parametrize("path", MANIFESTS, ids=[str(p.relative_to(REPOSITORY)) for p in MANIFESTS])
def test_every_manifest_in_the_repository_reads_the_same(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        expected = pyyaml(text)
    except yaml.YAMLError:
        assert yamltext.fast_documents(text) is None or "{{" in text
        return
    fast = yamltext.fast_documents(text)
    assert fast is None or fast == expected


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["yes", "No", "on", "0777", "1:30", "1e3", "=", "<<", "~", "0x1F", "1_000"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=8), _VALUES, min_size=1, max_size=4), min_size=1),
    st.sampled_from([None, True, False]),
)
def test_dumped_documents_read_the_same(documents: list[dict[str, Any]], flow: bool | None) -> None:
    text = yaml.safe_dump_all(documents, default_flow_style=flow)
    fast = yamltext.fast_documents(text)
    if fast is not None:
        assert fast == pyyaml(text)
    assert yamltext.load_all(text) == pyyaml(text)
