"""A structural validator for the subset of JSON Schema that the Kubernetes OpenAPI
schemas use: ``type``, ``properties``, ``additionalProperties``, ``required``, ``items``,
``enum``, ``oneOf`` and ``$ref`` into the shared definitions (``format`` is an annotation,
as for the API server's decoder).

Why not a general JSON Schema library: importing one costs more than a whole
``dralet validate`` of a small file may take (it is a pre-commit hook). The messages
follow the usual JSON Schema wording, with values spelled as JSON
(``"x" is not of type "integer"``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SchemaError", "Validator", "shown"]

_Schema = Mapping[str, Any]


@dataclass(frozen=True)
class SchemaError:
    """One place where an instance does not match its schema."""

    path: tuple[str | int, ...]
    validator: str
    """The keyword that failed: ``type``, ``required``, ``additionalProperties``, ..."""
    message: str
    instance: Any
    schema: _Schema


SHOWN_MAX_LENGTH = 60


def shown(value: Any) -> str:
    """A value as the manifest's JSON would spell it (never a Python repr), shortened."""
    text = json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= SHOWN_MAX_LENGTH else text[: SHOWN_MAX_LENGTH - 3] + "..."


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    return True


class Validator:
    """Checks instances against one schema whose ``$ref`` s point into ``definitions``."""

    def __init__(self, schema: _Schema, *, definitions: Mapping[str, _Schema]) -> None:
        self._schema = schema
        self._definitions = definitions

    def iter_errors(self, instance: Any) -> Iterator[SchemaError]:
        return self._check(instance, self._schema, ())

    def _resolve(self, schema: _Schema) -> _Schema:
        while "$ref" in schema:
            name = str(schema["$ref"]).rpartition("/")[2]
            schema = self._definitions[name]
        return schema

    def _check(
        self, instance: Any, schema: _Schema, path: tuple[str | int, ...]
    ) -> Iterator[SchemaError]:
        schema = self._resolve(schema)
        types = schema.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else list(types)
            if not any(_is_type(instance, n) for n in names):
                names_text = ", ".join(f'"{n}"' for n in names)
                yield SchemaError(
                    path, "type", f"{shown(instance)} is not of type {names_text}", instance, schema
                )
                return
        enum = schema.get("enum")
        if enum is not None and instance not in enum:
            yield SchemaError(
                path, "enum", f"{shown(instance)} is not one of {shown(enum)}", instance, schema
            )
        one_of = schema.get("oneOf")
        if one_of is not None:
            matching = sum(1 for s in one_of if not any(self._check(instance, s, path)))
            if matching != 1:
                yield SchemaError(
                    path,
                    "oneOf",
                    f"{shown(instance)} is not valid under any of the given schemas",
                    instance,
                    schema,
                )
        if isinstance(instance, dict):
            yield from self._check_object(instance, schema, path)
        elif isinstance(instance, list):
            items = schema.get("items")
            if isinstance(items, Mapping):
                for index, item in enumerate(instance):
                    yield from self._check(item, items, (*path, index))

    def _check_object(
        self, instance: dict[str, Any], schema: _Schema, path: tuple[str | int, ...]
    ) -> Iterator[SchemaError]:
        for name in schema.get("required", ()):
            if name not in instance:
                yield SchemaError(
                    path, "required", f'"{name}" is a required property', instance, schema
                )
        properties: Mapping[str, _Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        unknown = False
        for key, value in instance.items():
            known = properties.get(key)
            if known is not None:
                yield from self._check(value, known, (*path, key))
            elif extra is False:
                unknown = True
            elif isinstance(extra, Mapping):
                yield from self._check(value, extra, (*path, key))
        if unknown:
            yield SchemaError(
                path,
                "additionalProperties",
                "Additional properties are not allowed",
                instance,
                schema,
            )
