"""A structural validator for the subset of JSON Schema that the Kubernetes OpenAPI
schemas use: ``type``, ``properties``, ``additionalProperties``, ``required``, ``items``,
``enum``, ``oneOf`` and ``$ref`` into the shared definitions. Of ``format`` only what the
API server's decoder enforces is checked: int32 and int64 ranges, RFC 3339 date-times
and the syntax of a resource quantity.

Why not a general JSON Schema library: importing one costs more than a whole
``dralet validate`` of a small file may take (it is a pre-commit hook). The messages
follow the usual JSON Schema wording, with values spelled as JSON
(``"x" is not of type "integer"``).
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dralet.validation import formats

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
QUANTITY_DEFINITION = "io.k8s.apimachinery.pkg.api.resource.Quantity"
"""A quantity is a string the server parses when it decodes the object: a bad one fails
the whole request (k8s.io/apimachinery pkg/api/resource/quantity.go UnmarshalJSON)."""
_ZERO_VALUES: dict[str, Any] = {
    "object": {},
    "array": [],
    "string": "",
    "integer": 0,
    "number": 0,
    "boolean": False,
}
"""What a Go field of each JSON type holds when the JSON says ``null``."""
_INTEGER_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
"""An integer the Go type cannot hold fails decoding."""


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


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})"
)
"""A metav1.Time decodes with Go's time.RFC3339 layout (k8s.io/apimachinery
pkg/apis/meta/v1/time.go UnmarshalJSON); a bad one fails the whole request."""


def _is_rfc3339(text: str) -> bool:
    match = _RFC3339.fullmatch(text)
    if match is None:
        return False
    try:
        year, month, day, hour, minute, second = (int(match.group(n)) for n in range(1, 7))
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


class Validator:
    """Checks instances against one schema whose ``$ref`` s point into ``definitions``."""

    def __init__(self, schema: _Schema, *, definitions: Mapping[str, _Schema]) -> None:
        self._schema = schema
        self._definitions = definitions

    @property
    def schema(self) -> _Schema:
        return self._schema

    @property
    def definitions(self) -> Mapping[str, _Schema]:
        return self._definitions

    def decoded(self, instance: Any) -> Any:
        """``instance`` as the API server decodes it into its Go types: a ``null`` list item
        or required field becomes its type's zero value (``{}``, ``""``, ``0``, ``false``),
        which validation then judges (a ``null`` request is a request without a name). A copy
        where anything changed; ``instance`` itself otherwise."""
        return self._decoded(instance, self._schema)

    def _decoded(self, instance: Any, schema: _Schema) -> Any:
        if str(schema.get("$ref", "")).endswith(QUANTITY_DEFINITION):
            return instance
        schema = self._resolve(schema)
        if isinstance(instance, dict):
            properties: Mapping[str, _Schema] = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            required = set(schema.get("required", ()))
            out = {}
            for key, value in instance.items():
                sub = properties.get(key, extra if isinstance(extra, Mapping) else None)
                if value is None and key in required and sub is not None:
                    out[key] = self._zero(sub)  # a required field is no pointer in Go
                else:
                    out[key] = value if sub is None else self._decoded(value, sub)
            changed = any(out[k] is not instance[k] for k in instance)
            return out if changed else instance
        if isinstance(instance, list):
            items = schema.get("items")
            if not isinstance(items, Mapping):
                return instance
            decoded = [
                self._zero(items) if item is None else self._decoded(item, items)
                for item in instance
            ]
            changed = any(a is not b for a, b in zip(decoded, instance, strict=True))
            return decoded if changed else instance
        return instance

    def _zero(self, schema: _Schema) -> Any:
        if str(schema.get("$ref", "")).endswith(QUANTITY_DEFINITION):
            return None
        resolved = self._resolve(schema)
        types = resolved.get("type")
        names = [types] if isinstance(types, str) else list(types or ())
        if "object" in names and not (
            resolved.get("properties") or resolved.get("additionalProperties")
        ):
            return None  # raw JSON (opaque parameters): null stays null
        for name, zero in _ZERO_VALUES.items():
            if name in names:
                return copy.deepcopy(zero)
        return None

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
        if str(schema.get("$ref", "")).endswith(QUANTITY_DEFINITION):
            if instance is None:
                return  # the zero quantity
            problem = formats.quantity_problem(instance)
            if problem is not None and isinstance(instance, str):
                yield SchemaError(path, "quantity", problem, instance, schema)
                return
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
        date_time = schema.get("format") == "date-time" and isinstance(instance, str)
        if date_time and not _is_rfc3339(instance):
            yield SchemaError(
                path,
                "format",
                f"{shown(instance)} is not a date-time (RFC 3339: 2026-01-02T15:04:05Z)",
                instance,
                schema,
            )
            return
        bounds = _INTEGER_BOUNDS.get(str(schema.get("format")))
        if bounds is not None and isinstance(instance, int) and not isinstance(instance, bool):
            low, high = bounds
            if not low <= instance <= high:
                yield SchemaError(
                    path,
                    "format",
                    f"{instance} does not fit in {schema.get('format')}",
                    instance,
                    schema,
                )
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
