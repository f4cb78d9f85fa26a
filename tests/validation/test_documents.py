"""Locating keys and values of multi-document YAML and JSON by line and column."""

from __future__ import annotations

import io

from dralet.validation.diagnostics import Anchor
from dralet.validation.documents import (
    ManifestObject,
    Position,
    Source,
    parse_source,
    read_sources,
)

TEXT = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: first}
---
apiVersion: resource.k8s.io/v1beta1
kind: DeviceClass
metadata:
  name: gpu
spec:
  selectors:
  - cel:
      expression: "device.driver == 'x'"
  - cel:
      expression: |
        device.driver ==
          'y'
"""


def _objects() -> list[ManifestObject]:
    objects, problems = parse_source(Source("f.yaml", TEXT))
    assert problems == []
    return objects


def test_every_document_is_an_object_with_file_positions() -> None:
    first, second = _objects()
    assert (first.kind, first.document, second.kind, second.document) == (
        "ConfigMap",
        0,
        "DeviceClass",
        1,
    )
    assert second.locate(("metadata", "name")) == Position(8, 9)
    assert second.locate(("metadata", "name"), anchor=Anchor.KEY) == Position(8, 3)


def test_collections_are_located_at_their_key_and_missing_paths_at_the_nearest_parent() -> None:
    second = _objects()[1]
    assert second.locate(("spec", "selectors")) == Position(10, 3)
    assert second.locate(("spec", "selectors", 1)) == Position(13, 5)
    assert second.locate(("spec", "selectors", 1, "cel", "missing")) == Position(13, 5)


def test_scalar_text_starts_past_a_quote_and_inside_a_block() -> None:
    second = _objects()[1]
    quoted = ("spec", "selectors", 0, "cel", "expression")
    block = ("spec", "selectors", 1, "cel", "expression")
    assert second.locate(quoted) == Position(12, 19)
    assert second.locate_scalar_text(quoted) == Position(12, 20)
    assert second.locate_scalar_text(block) == Position(15, 9)


def test_data_is_plain_json_values() -> None:
    second = _objects()[1]
    expression = second.data["spec"]["selectors"][0]["cel"]["expression"]
    assert type(expression) is str
    assert type(second.data["spec"]) is dict


def test_syntax_errors_are_located() -> None:
    objects, problems = parse_source(Source("bad.yaml", "a: [1, 2\nb: c\n"))
    assert objects == []
    assert [(p.rule, p.position) for p in problems] == [("DRA001", Position(2, 2))]


def test_json_is_read_with_positions() -> None:
    text = '{\n  "apiVersion": "v1",\n  "kind": "Pod",\n  "metadata": {"name": "p"}\n}\n'
    (pod,), _ = parse_source(Source("p.json", text))
    assert pod.locate(("metadata", "name")) == Position(4, 24)


def test_stdin_and_missing_namespace() -> None:
    (source,) = read_sources(["-"], stdin=io.StringIO("apiVersion: v1\nkind: Pod\n"))
    (pod,), _ = parse_source(source)
    assert (source.name, pod.namespace) == ("<stdin>", "default")
