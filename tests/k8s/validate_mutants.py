"""Mutants of accepted objects, grown from the API itself: the OpenAPI schema of each kind
(kubernetes-validate's, as validate bundles them) is walked beside a seed object, and every
field it declares, present in the seed or not, gets boundary and type mutations.

Operators (the *class* of a mutant), by what the schema says a field is:

- any field: ``delete``, ``null``, ``wrong type``;
- a field the seed lacks: ``add`` (a sample value built from its schema);
- a string: syntax classes (empty, upper case, leading dash, dots, slash, space, at and
  over 63 and 253 characters); a CEL expression: compile error, invalid regular
  expression literal, cost over the limit;
- an integer: -1, 0, the int32 and int64 edges and one past them;
- a quantity: empty, spaces, fractions, a suffix alone, a huge value;
- a boolean: flipped;
- a list: empty, a ``null`` item, the first item twice, counts at and over each API limit;
- an object: empty, an unknown field; a map: empty, a bad key, entries at and over the
  limits.

Workloads are mutated only where they refer to claims (``resourceClaims``,
``resources.claims``). Pure: ``tests/k8s/test_validate_differential.py`` sends the
mutants to a real server; ``tests/validation/test_validate_mutants.py`` checks that the
generator reaches every field.
"""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dralet.validation import schemas
from dralet.validation.structure import QUANTITY_DEFINITION

__all__ = ["Mutant", "all_mutants", "operator_class", "sample", "schema_fields"]

Path = tuple[str | int, ...]
DELETE = object()

COUNTS = (4, 5, 8, 9, 16, 17, 32, 33, 48, 49, 64, 65, 128, 129)
"""List lengths at and one over every size limit the DRA API has (4 binding conditions,
8 subrequests and counter sets, 16 taints, 32 requests, 48 attribute values, 64 and 128
devices)."""
MAP_COUNTS = (8, 9, 32, 33)
STRINGS = {
    "empty string": "",
    "upper case": "Upper_Case",
    "leading dash": "-leading",
    "dots": "a.b.c",
    "double dot": "a..b",
    "slash": "example.com/a",
    "two slashes": "example.com/a/b",
    "space": "with space",
    "63 chars": "a" * 63,
    "64 chars": "a" * 64,
    "253 chars": ".".join(["a" * 63] * 4)[:253],
    "254 chars": "b" * 254,
    "number text": "1Gi",
}
INTEGERS = {
    "-1": -1,
    "0": 0,
    "int32 max": 2**31 - 1,
    "int32 over": 2**31,
    "int64 max": 2**63 - 1,
    "int64 over": 2**63,
}
QUANTITIES = {
    "quantity empty": "",
    "quantity spaces": " 1Gi",
    "quantity fraction": "0.5",
    "quantity milli": "1500m",
    "quantity bad suffix": "1Gb",
    "quantity suffix alone": "Gi",
    "quantity negative": "-1",
    "quantity huge": "1E20",
    "quantity number": 3,
}
CEL = {
    "cel syntax error": "device.driver ==",
    "cel bad regex": 'device.driver.matches("[")',
    "cel wrong type": "device.driver",
    "cel unknown field": 'device.nosuch == "a"',
    "cel cost": (
        "device.attributes.exists(d, device.attributes[d].exists(a, "
        'device.attributes[d][a].matches("' + "a" * 1500 + '")))'
    ),
}
WRONG_TYPES = {"string": "x", "integer": 7, "boolean": True, "array": [], "object": {}}
_WORKLOAD_KINDS = frozenset({"Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"})
_CLAIM_WORDS = ("resourceClaims", "claims")
_ON_THE_WAY_TO_CLAIMS = frozenset({"resources", "initContainers", "ephemeralContainers"})
"""Workload fields that hold claim fields: added when the seed lacks them."""
_METADATA_FIELDS = frozenset({"name", "generateName", "labels", "annotations", "finalizers"})
SAMPLE_DEPTH = 6
_METADATA_DEPTH = 2
"""``metadata.name`` and its siblings, not what is inside labels or annotations."""


@dataclass(frozen=True)
class Mutant:
    """One mutation of one seed."""

    kind: str
    version: str
    seed: str
    field: str
    """The field without indexes or map keys (``spec.devices.attributes.int``): what the
    mutant reaches."""
    path: Path
    operator: str
    doc: dict[str, Any]

    @property
    def where(self) -> str:
        return ".".join(str(p) for p in self.path)

    @property
    def label(self) -> str:
        return f"{self.version} {self.kind}/{self.seed} {self.where}: {self.operator}"


class _Walker:
    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self.definitions = definitions

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            schema = self.definitions[str(schema["$ref"]).rpartition("/")[2]]
        return schema

    def types(self, schema: Mapping[str, Any]) -> list[str]:
        found = self.resolve(schema).get("type")
        if found is None:
            return []
        return [t for t in ([found] if isinstance(found, str) else found) if t != "null"]

    def sample(self, schema: Mapping[str, Any], depth: int = 0) -> Any:
        """A plain value of the schema's shape: the smallest that reaches its fields."""
        if _is_quantity(schema):
            return "1"
        resolved = self.resolve(schema)
        types = self.types(schema)
        if "object" in types:
            if depth >= SAMPLE_DEPTH:
                return {}
            properties = resolved.get("properties") or {}
            if properties:
                return {name: self.sample(sub, depth + 1) for name, sub in properties.items()}
            extra = resolved.get("additionalProperties")
            if isinstance(extra, Mapping):
                return {"a": self.sample(extra, depth + 1)}
            return {}
        if "array" in types:
            items = resolved.get("items")
            return [self.sample(items, depth + 1)] if isinstance(items, Mapping) else []
        if "integer" in types or "number" in types:
            return 1
        if "boolean" in types:
            return True
        return "a"


def _is_quantity(schema: Mapping[str, Any]) -> bool:
    return str(schema.get("$ref", "")).endswith(QUANTITY_DEFINITION)


def _values_for(
    walker: _Walker, schema: Mapping[str, Any], value: Any, path: Path
) -> Iterator[tuple[str, Any]]:
    """(operator, new value) for the place at ``path`` holding ``value`` (absent: DELETE)."""
    absent = value is DELETE
    if absent:
        yield "add", walker.sample(schema)
        return
    yield "delete", DELETE
    yield "null", None
    types = walker.types(schema)
    for name, wrong in WRONG_TYPES.items():
        if name not in types and not (name == "integer" and "number" in types):
            if _is_quantity(schema) and name in {"string", "integer"}:
                continue
            yield f"wrong type {name}", wrong
    if _is_quantity(schema):
        yield from QUANTITIES.items()
        return
    resolved = walker.resolve(schema)
    if "string" in types:
        if path and path[-1] == "expression":
            yield from CEL.items()
        yield from STRINGS.items()
    elif "integer" in types:
        yield from INTEGERS.items()
    elif "boolean" in types and isinstance(value, bool):
        yield "flip", not value
    elif "array" in types and isinstance(value, list):
        yield "empty list", []
        yield "null item", [None, *value]
        if value:
            yield "first item twice", [value[0], *value]
            for count in COUNTS:
                yield f"{count} items", [copy.deepcopy(value[0]) for _ in range(count)]
    elif "object" in types and isinstance(value, dict) and resolved.get("properties"):
        yield "empty object", {}
        yield "unknown field", {**value, "bogusField": 1}
    elif "object" in types and isinstance(value, dict):
        extra = resolved.get("additionalProperties")
        if isinstance(extra, Mapping):
            yield "empty map", {}
            if value:
                first = next(iter(value.values()))
                yield "bad key", {**value, "Bad Key!": copy.deepcopy(first)}
                for count in MAP_COUNTS:
                    yield f"{count} entries", {f"k{n}": copy.deepcopy(first) for n in range(count)}


def _places(
    walker: _Walker, value: Any, schema: Mapping[str, Any], path: Path, field: tuple[str, ...]
) -> Iterator[tuple[Path, tuple[str, ...], Mapping[str, Any], Any]]:
    """Every (path, field, schema, value) the schema declares under ``value``, absent
    fields with the value DELETE; ``field`` is the path less indexes and map keys."""
    if _is_quantity(schema):
        return
    resolved = walker.resolve(schema)
    if isinstance(value, dict):
        properties: Mapping[str, Any] = resolved.get("properties") or {}
        for name, sub in properties.items():
            if path == () and name in {"apiVersion", "kind", "status"}:
                continue
            if path == ("metadata",) and name not in _METADATA_FIELDS:
                continue
            here, named = (*path, name), (*field, name)
            if name in value:
                yield here, named, sub, value[name]
                yield from _places(walker, value[name], sub, here, named)
            else:
                yield here, named, sub, DELETE
        extra = resolved.get("additionalProperties")
        if not properties and isinstance(extra, Mapping):
            for key, item in value.items():
                yield (*path, key), field, extra, item
                yield from _places(walker, item, extra, (*path, key), field)
    elif isinstance(value, list):
        items = resolved.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                yield (*path, index), field, items, item
                yield from _places(walker, item, items, (*path, index), field)


def _apply(doc: dict[str, Any], path: Path, new: Any) -> dict[str, Any]:
    mutant = copy.deepcopy(doc)
    parent: Any = mutant
    for part in path[:-1]:
        parent = parent[part]
    if new is DELETE:
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(new)
    return mutant


def _wanted(kind: str, path: Path) -> bool:
    if path and path[0] == "metadata":
        return len(path) <= _METADATA_DEPTH
    if kind not in _WORKLOAD_KINDS:
        return True
    if path[-1] in _ON_THE_WAY_TO_CLAIMS:
        return True
    return any(isinstance(p, str) and p in _CLAIM_WORDS for p in path)


def _schema(release: str, api_version: str, kind: str) -> tuple[_Walker, Mapping[str, Any]] | None:
    validator = schemas.validator_for(release, api_version, kind)
    if validator is None:
        return None
    return _Walker(validator.definitions), validator.schema


def all_mutants(seeds: Sequence[dict[str, Any]], *, release: str) -> Iterator[Mutant]:
    """Every mutant of every seed, in the order of the seeds and of their schemas."""
    for seed in seeds:
        kind = str(seed.get("kind"))
        api_version = str(seed.get("apiVersion"))
        found = _schema(release, api_version, kind)
        if found is None:
            continue
        walker, schema = found
        meta = seed.get("metadata") or {}
        name = str(meta.get("name") or meta.get("generateName") or "")
        version = api_version.rpartition("/")[2]
        for path, field, sub, value in _places(walker, seed, schema, (), ()):
            if not _wanted(kind, path):
                continue
            who = (kind, version, name, ".".join(field))
            for operator, new in _values_for(walker, sub, value, path):
                yield Mutant(*who, path, operator, _apply(seed, path, new))
            if value is DELETE:
                yield from _inside_added(walker, seed, (path, field), sub, who)


def _inside_added(
    walker: _Walker,
    seed: dict[str, Any],
    where: tuple[Path, tuple[str, ...]],
    schema: Mapping[str, Any],
    who: tuple[str, str, str, str],
) -> Iterator[Mutant]:
    """Mutants inside a field the seed lacks: the field is added with its sample value,
    then every place inside that is mutated (operator ``add, then ...``)."""
    path, field = where
    added = walker.sample(schema)
    base = _apply(seed, path, added)
    for inner, named, sub, value in _places(walker, added, schema, path, field):
        if value is DELETE or not _wanted(who[0], inner):
            continue  # one level of adding: the sample already has every field
        for operator, new in _values_for(walker, sub, value, inner):
            yield Mutant(
                *who[:3], ".".join(named), inner, f"add, then {operator}", _apply(base, inner, new)
            )


def schema_fields(api_version: str, kind: str, *, release: str) -> set[str]:
    """Every field path (no indexes) the kind's schema declares below spec, to the depth
    at which a sample would stop: what the generator must reach."""
    found = _schema(release, api_version, kind)
    if found is None:
        return set()
    walker, schema = found
    out: set[str] = set()

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...], seen: frozenset[str]) -> None:
        if _is_quantity(node):
            return
        ref = str(node.get("$ref", ""))
        if ref and ref in seen:
            return
        resolved = walker.resolve(node)
        for name, sub in (resolved.get("properties") or {}).items():
            if not prefix and name != "spec":
                continue
            here = (*prefix, name)
            out.add(".".join(here))
            walk(sub, here, seen | {ref})
        items = resolved.get("items")
        if isinstance(items, Mapping):
            walk(items, prefix, seen | {ref})
        extra = resolved.get("additionalProperties")
        if isinstance(extra, Mapping):
            walk(extra, prefix, seen | {ref})

    walk(schema, (), frozenset())
    return out


def sample(mutants: Sequence[Mutant], *, size: int, seed: int) -> list[Mutant]:
    """``size`` mutants that cover every (kind, operator) class before any repeats: each
    class shuffled with ``seed``, then taken round-robin."""
    classes: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
    for mutant in mutants:
        classes[mutant.kind, _class(mutant.operator)].append(mutant)
    rng = random.Random(seed)
    queues = []
    for key in sorted(classes):
        members = classes[key]
        rng.shuffle(members)
        queues.append(members)
    picked: list[Mutant] = []
    while len(picked) < size and any(queues):
        for queue in queues:
            if queue and len(picked) < size:
                picked.append(queue.pop())
    return picked


def _class(operator: str) -> str:
    """Counts of items or entries are one class: one per length would be too fine."""
    operator = operator.removeprefix("add, then ")
    return "count" if operator.endswith((" items", " entries")) else operator


def operator_class(mutant: Mutant) -> str:
    """The class a mutant belongs to, as the run reports its coverage."""
    return _class(mutant.operator)
