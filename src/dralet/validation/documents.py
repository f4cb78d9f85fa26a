"""Reading manifests: files, directories and stdin, split into Kubernetes objects whose
every key and value can be located by line and column.

Checks work on plain data (``dict``/``list``/scalars) and name places by path. A file is
first read by the fast C YAML loader; positions come from the round-trip parser
(ruamel.yaml), which runs only when a diagnostic must be located, so a clean file never
pays for it. A file the fast path cannot read exactly as the round-trip parser would
(YAML 1.1-only scalars such as ``yes`` or ``0777``, duplicate keys, syntax errors,
documents that are not objects) is read by the round-trip parser alone. JSON files are
read the same way (JSON is YAML). ``kind: List`` documents are split into their items.
"""

from __future__ import annotations

import datetime
import functools
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any, TextIO

from dralet.validation.diagnostics import Anchor, Path

__all__ = [
    "MANIFEST_SUFFIXES",
    "STDIN_NAME",
    "LoadProblem",
    "ManifestObject",
    "Position",
    "Roots",
    "Source",
    "locate",
    "locate_scalar_text",
    "parse_source",
    "read_sources",
]

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""Files a directory walk picks up."""
STDIN_NAME = "<stdin>"
"""How diagnostics name the standard input."""


@dataclass(frozen=True)
class Position:
    """A 1-based line and column."""

    line: int
    column: int


@dataclass(frozen=True)
class Source:
    """The text of one input, with the name diagnostics use for it."""

    name: str
    text: str


@dataclass(frozen=True)
class LoadProblem:
    """A file or document that could not be read as Kubernetes objects."""

    file: str
    position: Position
    message: str
    rule: str
    field: str = ""
    """The field the problem is about, where it is one (a mis-cased ``apiversion``)."""


@dataclass(frozen=True)
class ManifestObject:
    """One Kubernetes object: its plain data and where it sits in its file."""

    file: str
    document: int
    """0-based index of the YAML document in the file."""
    data: dict[str, Any]
    roots: Roots = field(repr=False, compare=False)
    """The round-trip nodes of the file's documents (for positions), parsed on demand."""
    base: Path = ()
    """Path of this object inside the document (``("items", 3)`` inside a List)."""
    lines: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def api_version(self) -> str:
        value = self.data.get("apiVersion")
        return value if isinstance(value, str) else ""

    @property
    def kind(self) -> str:
        value = self.data.get("kind")
        return value if isinstance(value, str) else ""

    @property
    def metadata(self) -> dict[str, Any]:
        value = self.data.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def name(self) -> str:
        value = self.metadata.get("name")
        return value if isinstance(value, str) else ""

    @property
    def namespace(self) -> str:
        """The object's namespace, ``default`` when the manifest leaves it out."""
        value = self.metadata.get("namespace")
        return value if isinstance(value, str) and value else "default"

    @property
    def annotations(self) -> dict[str, Any]:
        value = self.metadata.get("annotations")
        return value if isinstance(value, dict) else {}

    @property
    def root(self) -> Any:
        """The round-trip node of this object's document."""
        return self.roots.document(self.document)

    def locate(self, path: Path, *, anchor: Anchor = Anchor.VALUE) -> Position:
        return locate(self.root, self.base + path, anchor=anchor)

    def locate_scalar_text(self, path: Path) -> Position:
        return locate_scalar_text(self.root, self.base + path, lines=self.lines)


def read_sources(paths: Sequence[str], *, stdin: TextIO) -> list[Source]:
    """The inputs named on the command line; directories are walked, ``-`` is stdin."""
    sources: list[Source] = []
    for given in paths:
        if given == "-":
            sources.append(Source(STDIN_NAME, stdin.read()))
            continue
        path = FilePath(given)
        if path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES
            )
        else:
            files = [path]
        sources.extend(Source(str(p), p.read_text(encoding="utf-8")) for p in files)
    return sources


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    return yaml


class Roots:
    """The round-trip documents of one file, parsed on first use."""

    def __init__(self, text: str, documents: list[Any] | None = None) -> None:
        self._text = text
        self._documents = documents

    def document(self, index: int) -> Any:
        if self._documents is None:
            self._documents = list(_yaml().load_all(io.StringIO(self._text)))
        return self._documents[index]


@functools.cache
def _fast_loader() -> Any:
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[str] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key.value!r}", key.start_mark
                        )
                    seen.add(key.value)
            return super().construct_mapping(node, deep=deep)

    Loader.add_constructor("tag:yaml.org,2002:map", Loader.construct_yaml_map)
    return Loader


def _fast_documents(text: str) -> list[Any] | None:
    """The plain documents of a file, or None when only the round-trip parser will do."""
    from dralet import yamltext

    documents = yamltext.fast_documents(text)
    if documents is None:
        if yamltext.YAML_11_ONLY.search(text):
            return None  # the round-trip parser reads YAML 1.2
        import yaml

        try:
            documents = list(yaml.load_all(text, Loader=_fast_loader()))
        except yaml.YAMLError:
            return None
    for document in documents:
        if document is None:
            continue
        if not _is_object(document) or _miscased_type_keys(document):
            return None
        items = document.get("items") if document.get("kind") == "List" else None
        if isinstance(items, list) and not all(_is_object(item) for item in items):
            return None
    return documents


def _is_object(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("apiVersion"), str)
        and bool(value["apiVersion"])
        and isinstance(value.get("kind"), str)
        and bool(value["kind"])
    )


_TEMPLATE = re.compile(r"^\s*(?:-\s+)?\{\{-?|:\s+\{\{-?\s*[.$\w]", re.MULTILINE)
"""A Helm or Go template action where YAML expects a value or a line of its own."""


def parse_source(source: Source) -> tuple[list[ManifestObject], list[LoadProblem]]:
    """Every Kubernetes object in one input, plus what could not be read."""
    lines = tuple(source.text.splitlines())
    template = _TEMPLATE.search(source.text)
    if template is not None:
        line = source.text.count("\n", 0, template.start()) + 1
        text = lines[line - 1] if line <= len(lines) else ""
        column = len(text) - len(text.lstrip()) + 1
        return [], [
            LoadProblem(
                source.name,
                Position(line, column),
                "an unrendered template ({{ ... }}): render it first (helm template, "
                "kustomize build) and check the output",
                "DRA001",
            )
        ]
    fast = _fast_documents(source.text)
    if fast is not None:
        roots = Roots(source.text)
        objects: list[ManifestObject] = []
        for index, document in enumerate(fast):
            if document is None:
                continue
            data = to_plain(document)
            if data.get("kind") == "List" and isinstance(data.get("items"), list):
                objects.extend(
                    ManifestObject(source.name, index, item, roots, ("items", i), lines)
                    for i, item in enumerate(data["items"])
                )
            else:
                objects.append(ManifestObject(source.name, index, data, roots, (), lines))
        return objects, []
    return _parse_round_trip(source, lines)


def _parse_round_trip(
    source: Source, lines: tuple[str, ...]
) -> tuple[list[ManifestObject], list[LoadProblem]]:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    objects: list[ManifestObject] = []
    problems: list[LoadProblem] = []
    try:
        documents = list(_yaml().load_all(io.StringIO(source.text)))
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        position = Position(mark.line + 1, mark.column + 1) if mark else Position(1, 1)
        reason = " ".join(part for part in (error.context, error.problem) if part)
        problems.append(LoadProblem(source.name, position, f"not valid YAML: {reason}", "DRA001"))
        return objects, problems
    except YAMLError as error:
        problems.append(
            LoadProblem(source.name, Position(1, 1), f"not valid YAML: {error}", "DRA001")
        )
        return objects, problems
    roots = Roots(source.text, documents)
    for index, root in enumerate(documents):
        objects.extend(_objects(source.name, index, root, roots, lines, problems))
    return objects, problems


def _objects(
    file: str,
    index: int,
    root: Any,
    roots: Roots,
    lines: tuple[str, ...],
    problems: list[LoadProblem],
) -> Iterator[ManifestObject]:
    from ruamel.yaml.comments import CommentedMap

    if root is None:
        return
    start = _start(root)
    if not isinstance(root, CommentedMap):
        problems.append(
            LoadProblem(file, start, "document is not a Kubernetes object; skipped", "DRA002")
        )
        return
    data = to_plain(root)
    if data.get("kind") == "List" and isinstance(data.get("items"), list):
        for item_index, item in enumerate(data["items"]):
            base: Path = ("items", item_index)
            if not isinstance(item, dict) or not item.get("apiVersion") or not item.get("kind"):
                problems.append(
                    LoadProblem(
                        file,
                        locate(root, base, anchor=Anchor.KEY),
                        "list item has no apiVersion or kind; skipped",
                        "DRA002",
                    )
                )
                continue
            yield ManifestObject(file, index, item, roots, base, lines)
        return
    miscased = _miscased_type_keys(data)
    if miscased:
        problems.append(
            LoadProblem(
                file,
                locate(root, (miscased[0],), anchor=Anchor.KEY),
                "keys are case-sensitive: "
                + ", ".join(f"{k!r} must be spelled {_TYPE_KEYS[k.lower()]!r}" for k in miscased)
                + " (kubectl refuses the document)",
                "DRA005",
                miscased[0],
            )
        )
        return
    if not data.get("apiVersion") or not data.get("kind"):
        problems.append(
            LoadProblem(file, start, "document has no apiVersion or kind; skipped", "DRA002")
        )
        return
    yield ManifestObject(file, index, data, roots, (), lines)


_TYPE_KEYS = {"apiversion": "apiVersion", "kind": "kind"}


def _miscased_type_keys(data: dict[str, Any]) -> list[str]:
    """``apiversion:`` or ``Kind:`` where ``apiVersion``/``kind`` is meant."""
    return [
        key
        for key in data
        if key.lower() in _TYPE_KEYS
        and key != _TYPE_KEYS[key.lower()]
        and _TYPE_KEYS[key.lower()] not in data
    ]


def to_plain(node: Any) -> Any:
    """Round-trip nodes as the JSON the API server would receive."""
    if isinstance(node, dict):
        return {str(key): to_plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [to_plain(item) for item in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, datetime.date):
        return node.isoformat()
    return str(node)


def _start(node: Any) -> Position:
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None:
        return Position(1, 1)
    return Position(lc.line + 1, lc.col + 1)


def _is_collection(node: Any) -> bool:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    return isinstance(node, CommentedMap | CommentedSeq)


def locate(root: Any, path: Iterable[str | int], *, anchor: Anchor = Anchor.VALUE) -> Position:
    """Where the node at ``path`` sits; the deepest existing ancestor if it is missing.

    ``Anchor.VALUE`` points at a scalar value itself, and at the key of a mapping or
    list value (a list or mapping starts on the line after its key).
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    node = root
    here = _start(root)
    for step in path:
        if isinstance(node, CommentedMap) and step in node:
            key_line, key_col = node.lc.key(step)
            value_line, value_col = node.lc.value(step)
            child = node[step]
            key_position = Position(key_line + 1, key_col + 1)
            if anchor is Anchor.KEY or _is_collection(child):
                here = key_position
            else:
                here = Position(value_line + 1, value_col + 1)
            node = child
        elif isinstance(node, CommentedSeq) and isinstance(step, int) and 0 <= step < len(node):
            item_line, item_col = node.lc.item(step)
            here = Position(item_line + 1, item_col + 1)
            node = node[step]
        else:
            break
    return here


def locate_scalar_text(root: Any, path: Path, *, lines: Sequence[str]) -> Position:
    """Where the text of the string at ``path`` starts: past a quote, or on the first
    content line of a ``|`` or ``>`` block."""
    from ruamel.yaml.scalarstring import (
        DoubleQuotedScalarString,
        FoldedScalarString,
        LiteralScalarString,
        SingleQuotedScalarString,
    )

    position = locate(root, path)
    node = root
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return position
    if isinstance(node, DoubleQuotedScalarString | SingleQuotedScalarString):
        return Position(position.line, position.column + 1)
    if isinstance(node, LiteralScalarString | FoldedScalarString):
        for number in range(position.line, len(lines)):
            text = lines[number]
            if text.strip():
                return Position(number + 1, len(text) - len(text.lstrip()) + 1)
    return position
