"""A driver's own configuration file, read into a pydantic model with every problem one
line naming the file and the line (``dralet.parse_yaml_config`` for driver authors; the
hostdev driver reads its groups with it).

The text is read by the round-trip parser, so the first problem pydantic reports is
located where it is written; the others are counted in the same line.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import pydantic

from dralet.validation.documents import locate, to_plain

__all__ = ["YamlConfigError", "parse_yaml_config"]

ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)


class YamlConfigError(ValueError):
    """The configuration is unusable; the message is one line naming the file and line."""


def parse_yaml_config(text: str, model: type[ModelT], *, source: str = "<config>") -> ModelT:
    """``text`` (YAML or JSON, a mapping) validated as ``model``; ``YamlConfigError`` as
    ``<source>:<line>: <field>: <problem>`` for the first problem (with how many more)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        root = YAML(typ="rt").load(io.StringIO(text))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlConfigError(f"{source}{line}: not YAML: {problem}") from None
    if not isinstance(root, Mapping):
        raise YamlConfigError(f"{source}:1: expected a mapping")
    try:
        return model.model_validate(to_plain(root))
    except pydantic.ValidationError as exc:
        found = exc.errors()
        # Of a union's failed members, the one whose shape the input had says the most.
        telling = [e for e in found if not str(e["type"]).endswith(("_type", "_parsing"))]
        first = (telling or found)[0]
        where = _path_in_file(root, first)
        field = ".".join(str(step) for step in where) or "(top)"
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown field"
        others = {tuple(_path_in_file(root, e)) for e in found} - {tuple(where)}
        more = len(others)
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        at = locate(root, where).line
        raise YamlConfigError(f"{source}:{at}: {field}: {message}{suffix}") from None


def _path_in_file(root: Any, error: Mapping[str, Any]) -> list[str | int]:
    """The error's location as keys and indexes of the file: the steps pydantic inserts
    for a union's members (named after their types) are not in it and are left out; a
    missing field keeps its name."""
    loc: Sequence[str | int] = error["loc"]
    steps: list[str | int] = []
    node = root
    for index, step in enumerate(loc):
        in_file = (isinstance(node, Mapping) and step in node) or (
            isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
        )
        if in_file:
            node = node[step]
        elif not (index == len(loc) - 1 and error["type"] == "missing"):
            continue
        steps.append(step)
    return steps
