"""JSON merge patches (RFC 7386), JSON patches (RFC 6902) and the strategic-merge patch of
``metadata.finalizers``; a patch that cannot apply is refused as 422 Invalid."""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from dralet.apiserver.errors import ApiStatusError

__all__ = ["apply_list_map", "json_patch", "merge_patch", "strategic_merge_patch"]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes, lists replace)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ObjectMeta.Finalizers is ``patchStrategy=merge``, ``listType=set``
# (k8s.io/apimachinery@v0.37.2 pkg/apis/meta/v1/types.go); a primitive list's entries are
# removed with the ``$deleteFromPrimitiveList/<field>`` directive
# (k8s.io/apimachinery@v0.37.2 pkg/util/strategicpatch/patch.go).
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"
_MERGED_SETS = frozenset({"finalizers"})


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic-merge patch as the API server applies it to the fields this stand-in
    serves: a merge patch, except that ``metadata.finalizers`` is a set the patch adds to
    (and removes from with ``$deleteFromPrimitiveList/finalizers``) instead of replacing."""
    metadata_patch = patch.get("metadata") if isinstance(patch, Mapping) else None
    if not isinstance(metadata_patch, Mapping) or not isinstance(target, Mapping):
        return merge_patch(target, patch)
    result = merge_patch(target, {k: v for k, v in patch.items() if k != "metadata"})
    metadata = dict(result.get("metadata") or {})
    plain: dict[str, Any] = {}
    for key, value in metadata_patch.items():
        if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            field = key[len(_DELETE_FROM_PRIMITIVE_LIST) :]
            removed = set(value or [])
            kept = [item for item in metadata.get(field) or [] if item not in removed]
            metadata[field] = kept
            if not kept:
                metadata.pop(field)
        elif key in _MERGED_SETS and isinstance(value, list):
            merged = list(metadata.get(key) or [])
            merged.extend(item for item in value if item not in merged)
            metadata[key] = merged
        else:
            plain[key] = value
    return {**result, "metadata": merge_patch(metadata, plain)}


def apply_list_map(
    current: Sequence[Mapping[str, Any]],
    applied: Sequence[Mapping[str, Any]],
    *,
    key: Callable[[Mapping[str, Any]], Hashable],
    manager: str,
    owners: dict[Hashable, str],
) -> list[dict[str, Any]]:
    """Server-side apply of a ``listType=map`` list by one field manager: its applied
    items replace theirs (or are added), the items it applied before and left out now are
    removed, and every other manager's items stay. ``owners`` (key → manager) is updated."""
    wanted = {key(item): dict(item) for item in applied}
    result: list[dict[str, Any]] = []
    for item in current:
        k = key(item)
        if k in wanted:
            result.append(wanted.pop(k))
        elif owners.get(k) != manager:
            result.append(dict(item))
        else:
            del owners[k]
    result.extend(wanted.values())
    for item in applied:
        owners[key(item)] = manager
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiStatusError(422, "Invalid", f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def json_patch(document: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    doc = copy.deepcopy(document)
    for op in operations:
        try:
            kind = op["op"]
            parts = _pointer(str(op["path"]))
            if kind in ("move", "copy"):
                source = _pointer(str(op["from"]))
                value = copy.deepcopy(_container(doc, source))
                if kind == "move":
                    doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
                doc = json_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
                continue
            if kind == "test":
                if _container(doc, parts) != op.get("value"):
                    raise ApiStatusError(422, "Invalid", f"test operation failed at {op['path']}")
                continue
            if not parts:
                doc = copy.deepcopy(op.get("value"))
                continue
            parent = _container(doc, parts[:-1])
            last = parts[-1]
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "replace":
                index: Any = int(last) if isinstance(parent, list) else last
                if not isinstance(parent, list) and last not in parent:
                    raise KeyError(last)
                parent[index] = copy.deepcopy(op.get("value"))
            else:
                raise ApiStatusError(422, "Invalid", f"unknown JSON patch operation {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiStatusError(
                422, "Invalid", f"JSON patch {op!r} cannot be applied: {error!r}"
            ) from error
    return doc
