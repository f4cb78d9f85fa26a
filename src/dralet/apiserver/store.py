"""The stand-in's object store: every object once, in v1 shape, converted on the way in
and out (``dralet.kube.shapes``), with the semantics drivers depend on: a global monotonic
resourceVersion, uid, creationTimestamp, generation, generateName; 409 AlreadyExists and
409 Conflict on a stale resourceVersion or uid precondition; finalizers and
deletionTimestamp; status subresources; and the history watches replay from.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import dataclasses
import datetime
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dralet.apiserver import selectors
from dralet.apiserver.errors import ApiStatusError, JSONObject
from dralet.apiserver.kinds import BY_KIND, Kind, served_versions
from dralet.apiserver.patches import merge_patch
from dralet.apiserver.settings import ApiServerSettings
from dralet.apiserver.validity import schema_errors, semantic_errors
from dralet.kube import shapes

__all__ = ["Store", "Watcher", "WriteRecord"]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GENERATE_SUFFIX_LENGTH = 5


@dataclass(frozen=True)
class WriteRecord:
    """One accepted write, as the client sent it (after patching), for tests to inspect."""

    verb: str
    """create, update, patch, apply, delete."""
    kind: str
    api_version: str
    """The version the write was made in."""
    namespace: str
    name: str
    object: Mapping[str, Any]
    """The written object in the version it was written in."""
    field_manager: str = ""


@dataclass(eq=False)
class Watcher:
    """One open watch: the events after its start, ``None`` when it must end."""

    kind: Kind
    namespace: str | None
    matches: Callable[[Mapping[str, Any]], bool]
    queue: asyncio.Queue[tuple[str, JSONObject] | None] = field(default_factory=asyncio.Queue)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """The objects, with the API server's semantics for every write, and their history.

    The helpers (``create``, ``get``, ``patch``, ``delete``, ``list``, ``compact``) act
    without HTTP; call them from the event loop the store's watches run in.
    """

    def __init__(self, settings: ApiServerSettings | None = None, **overrides: Any) -> None:
        base = settings or ApiServerSettings()
        self.settings = dataclasses.replace(base, **overrides)
        self.versions = served_versions(self.settings.kubernetes_version)
        self.preferred_version = self.versions[0]
        self.writes: builtins.list[WriteRecord] = []
        self._objects: dict[tuple[str, str, str], JSONObject] = {}
        self._resource_version = 0
        self._log: builtins.list[tuple[int, str, Kind, JSONObject]] = []
        self._compacted = 0
        self._watchers: set[Watcher] = set()

    # -- store helpers (no HTTP) --------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> JSONObject:
        """Create ``obj`` (in any served version); the stored object in that version."""
        kind, version = self._kind_of(obj)
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return self._create(kind, version, ns if kind.namespaced else None, obj, manager="")

    def get(
        self, kind: str, name: str, *, namespace: str | None = None, version: str | None = None
    ) -> JSONObject | None:
        """The object in ``version`` (default: newest served), or None."""
        kind_ = BY_KIND[kind]
        stored = self._objects.get((kind_.plural, namespace or "", name))
        return None if stored is None else self._out(kind_, stored, version)

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        version: str | None = None,
    ) -> builtins.list[JSONObject]:
        kind_ = BY_KIND[kind]
        matches = selectors.matcher(kind_, label_selector, field_selector)
        return [
            self._out(kind_, obj, version) for obj in self._select(kind_, namespace) if matches(obj)
        ]

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
        version: str | None = None,
    ) -> JSONObject:
        """Merge-patch an object (``subresource="status"`` to play the scheduler)."""
        kind_ = BY_KIND[kind]
        return self._patch(
            kind_,
            version or self.preferred_version,
            namespace,
            name,
            subresource,
            lambda current: merge_patch(current, patch),
            verb="patch",
            manager="",
        )

    def delete(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject:
        kind_ = BY_KIND[kind]
        return self._delete(kind_, self._version_for(kind_), namespace, name, {})

    def compact(self) -> int:
        """Forget all history (as etcd compaction does) and end every watch, so watches
        resumed from an older resourceVersion get 410 Gone; the compacted revision."""
        self._compacted = self._resource_version
        self._log.clear()
        self.end_watches()
        return self._compacted

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        return self._resource_version

    def writes_of(
        self, kind: str, *, field_manager: str | None = None
    ) -> builtins.list[WriteRecord]:
        """The accepted writes of one kind, oldest first."""
        return [
            w
            for w in self.writes
            if w.kind == kind and (field_manager is None or w.field_manager == field_manager)
        ]

    # -- watches ----------------------------------------------------------------------

    def subscribe(
        self,
        kind: Kind,
        namespace: str | None,
        matches: Callable[[Mapping[str, Any]], bool],
        since: str,
    ) -> Watcher:
        """A registered watch, primed with every event after ``since`` (every object as
        ADDED when ``since`` is '' or '0'); 410 Expired once that history is compacted.

        Registering and replaying are one step (no await between): no event falls between.
        """
        if since not in ("", "0") and int(since) < self._compacted:
            raise ApiStatusError(
                410, "Expired", f"too old resource version: {since} ({self._compacted})"
            )
        watcher = Watcher(kind, namespace, matches)
        if since in ("", "0"):
            backlog = [("ADDED", obj) for obj in self._select(kind, namespace)]
        else:
            backlog = [(e, obj) for rv, e, k, obj in self._log if k is kind and rv > int(since)]
        for event, obj in backlog:
            watcher.queue.put_nowait((event, copy.deepcopy(obj)))
        self._watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: Watcher) -> None:
        """Forget a watch that ended."""
        self._watchers.discard(watcher)

    def end_watches(self) -> None:
        """Tell every open watch to end."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)

    # -- internals: versions and conversion ----------------------------------------------

    def _kind_of(self, obj: Mapping[str, Any]) -> tuple[Kind, str]:
        kind = BY_KIND.get(str(obj.get("kind")))
        if kind is None:
            raise ApiStatusError(400, "BadRequest", f"kind {obj.get('kind')!r} is not served")
        api_version = str(obj.get("apiVersion") or "")
        version = api_version.rpartition("/")[2]
        if kind.group and (
            not api_version.startswith(f"{kind.group}/") or version not in self.versions
        ):
            raise ApiStatusError(
                400, "BadRequest", f"apiVersion {api_version!r} is not served for {kind.kind}"
            )
        return kind, version

    def _version_for(self, kind: Kind) -> str:
        return self.preferred_version if kind.group else "v1"

    def _api_version(self, kind: Kind, version: str) -> str:
        return f"{kind.group}/{version}" if kind.group else version

    def _out(self, kind: Kind, stored: Mapping[str, Any], version: str | None) -> JSONObject:
        if not kind.group:
            return copy.deepcopy(dict(stored))
        return shapes.to_version(stored, version or self.preferred_version)

    def _in(self, kind: Kind, obj: Mapping[str, Any], version: str) -> JSONObject:
        if not kind.group:
            return copy.deepcopy(dict(obj))
        return shapes.from_version(obj, version)

    def _select(self, kind: Kind, namespace: str | None) -> builtins.list[JSONObject]:
        return [
            obj
            for (plural, ns, _name), obj in sorted(self._objects.items())
            if plural == kind.plural and (namespace is None or ns == namespace)
        ]

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _emit(self, event: str, kind: Kind, stored: JSONObject) -> None:
        snapshot = copy.deepcopy(stored)
        self._log.append((self._resource_version, event, kind, snapshot))
        for watcher in list(self._watchers):
            if watcher.kind is kind:
                watcher.queue.put_nowait((event, snapshot))

    def _not_found(self, kind: Kind, name: str) -> ApiStatusError:
        return ApiStatusError(
            404,
            "NotFound",
            f'{self._resource_name(kind)} "{name}" not found',
            details={"name": name, "group": kind.group, "kind": kind.plural},
        )

    def _conflict(self, kind: Kind, name: str, why: str) -> ApiStatusError:
        return ApiStatusError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {self._resource_name(kind)} "{name}": {why}',
            details={"name": name, "group": kind.group, "kind": kind.plural},
        )

    @staticmethod
    def _resource_name(kind: Kind) -> str:
        return f"{kind.plural}.{kind.group}" if kind.group else kind.plural

    def _check(
        self,
        kind: Kind,
        version: str,
        obj: Mapping[str, Any],
        *,
        sent: Mapping[str, Any] | None = None,
    ) -> None:
        """Refuse ``obj`` (canonical) unless valid in ``version``, as a 422 Invalid.

        ``sent`` is the body as the client wrote it (in ``version``): its fields other than
        metadata and status are checked as sent, so a body in another version's shape is
        refused rather than quietly converted.
        """
        if not self.settings.validate:
            return
        as_written = self._out(kind, obj, version)
        if sent is not None:
            for key in set(as_written) | set(sent):
                if key in ("metadata", "status", "apiVersion", "kind"):
                    continue
                if key in sent:
                    as_written[key] = sent[key]
                else:
                    as_written.pop(key, None)
        problems = schema_errors(as_written, kubernetes_version=self.settings.kubernetes_version)
        if not problems:  # like the real server: decode (schema) first, then validate
            problems = semantic_errors(
                kind, obj, kubernetes_version=self.settings.kubernetes_version
            )
        if problems:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise ApiStatusError(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: ' + "; ".join(problems),
                details={
                    "name": name,
                    "group": kind.group,
                    "kind": kind.kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": p} for p in problems],
                },
            )

    def _record(
        self, verb: str, kind: Kind, version: str, stored: Mapping[str, Any], manager: str
    ) -> None:
        metadata = stored.get("metadata") or {}
        self.writes.append(
            WriteRecord(
                verb=verb,
                kind=kind.kind,
                api_version=self._api_version(kind, version),
                namespace=str(metadata.get("namespace") or ""),
                name=str(metadata.get("name") or ""),
                object=self._out(kind, stored, version),
                field_manager=manager,
            )
        )

    # -- internals: verbs --------------------------------------------------------------

    def _create(
        self,
        kind: Kind,
        version: str,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        manager: str,
        dry_run: bool = False,
        verb: str = "create",
    ) -> JSONObject:
        if body.get("kind") not in (None, kind.kind) or body.get("apiVersion") not in (
            None,
            self._api_version(kind, version),
        ):
            raise ApiStatusError(
                400,
                "BadRequest",
                f"the body is a {body.get('apiVersion')} {body.get('kind')}, "
                f"not a {self._api_version(kind, version)} {kind.kind}",
            )
        obj = self._in(
            kind,
            {**body, "kind": kind.kind, "apiVersion": self._api_version(kind, version)},
            version,
        )
        metadata = dict(obj.get("metadata") or {})
        if kind.namespaced:
            if not namespace:
                raise ApiStatusError(400, "BadRequest", "the namespace of the object is required")
            if metadata.get("namespace") not in (None, namespace):
                raise ApiStatusError(
                    400, "BadRequest", "the namespace of the object does not match the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        if not metadata.get("name"):
            prefix = metadata.get("generateName")
            if not prefix:
                raise ApiStatusError(
                    422, "Invalid", f"{kind.kind}: metadata.name or generateName is required"
                )
            suffix = "".join(
                secrets.choice(_GENERATE_ALPHABET) for _ in range(_GENERATE_SUFFIX_LENGTH)
            )
            metadata["name"] = f"{prefix}{suffix}"
        name = str(metadata["name"])
        key = (kind.plural, namespace or "" if kind.namespaced else "", name)
        if key in self._objects:
            raise ApiStatusError(
                409,
                "AlreadyExists",
                f'{self._resource_name(kind)} "{name}" already exists',
                details={"name": name, "group": kind.group, "kind": kind.plural},
            )
        for server_field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            metadata.pop(server_field, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = _now()
        metadata["generation"] = 1
        obj["metadata"] = metadata
        if kind.reset_status_on_create:
            obj.pop("status", None)
        self._check(kind, version, obj, sent=body)
        if dry_run:
            return self._out(kind, obj, version)
        metadata["resourceVersion"] = self._next_version()
        self._objects[key] = obj
        self._record(verb, kind, version, obj, manager)
        self._emit("ADDED", kind, obj)
        return self._out(kind, obj, version)

    def _current(self, kind: Kind, namespace: str | None, name: str) -> JSONObject:
        stored = self._objects.get((kind.plural, namespace or "", name))
        if stored is None:
            raise self._not_found(kind, name)
        return stored

    def _patch(
        self,
        kind: Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
        change: Callable[[JSONObject], Any],
        *,
        verb: str,
        manager: str,
        dry_run: bool = False,
    ) -> JSONObject:
        """Apply ``change`` to the object as served in ``version`` and store the result."""
        current = self._current(kind, namespace, name)
        served = self._out(kind, current, version)
        changed = change(served)
        if not isinstance(changed, dict):
            raise ApiStatusError(422, "Invalid", "the patched object is not a JSON object")
        return self._update(
            kind,
            version,
            current,
            changed,
            subresource,
            verb=verb,
            manager=manager,
            dry_run=dry_run,
        )

    def _update(
        self,
        kind: Kind,
        version: str,
        current: JSONObject,
        body: Mapping[str, Any],
        subresource: str,
        *,
        verb: str,
        manager: str,
        dry_run: bool = False,
    ) -> JSONObject:
        old_meta = current["metadata"]
        name = str(old_meta["name"])
        new = self._in(
            kind,
            {**body, "kind": kind.kind, "apiVersion": self._api_version(kind, version)},
            version,
        )
        sent = new.get("metadata") or {}
        sent_rv = sent.get("resourceVersion")
        if sent_rv not in (None, "") and str(sent_rv) != old_meta["resourceVersion"]:
            raise self._conflict(
                kind,
                name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        if sent.get("uid") not in (None, "", old_meta["uid"]):
            raise self._conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {sent.get('uid')}, "
                f"UID in object meta: {old_meta['uid']}",
            )
        if sent.get("name") not in (None, name):
            raise ApiStatusError(400, "BadRequest", "the name of the object does not match the URL")
        if subresource == "status":
            result = copy.deepcopy(current)
            if new.get("status") is None:
                result.pop("status", None)
            else:
                result["status"] = new["status"]
        else:
            result = new
            if kind.status_subresource and "status" in current:
                result["status"] = copy.deepcopy(current["status"])
            elif kind.status_subresource:
                result.pop("status", None)
            metadata = dict(sent)
            for kept in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
                "generation",
            ):
                if kept in old_meta:
                    metadata[kept] = old_meta[kept]
                else:
                    metadata.pop(kept, None)
            result["metadata"] = metadata
            new_finalizers = set(metadata.get("finalizers") or [])
            if old_meta.get("deletionTimestamp") and new_finalizers - set(
                old_meta.get("finalizers") or []
            ):
                raise ApiStatusError(
                    422,
                    "Invalid",
                    f'{kind.kind} "{name}" is invalid: metadata.finalizers: Forbidden: no new '
                    "finalizers can be added if the object is being deleted",
                )
            if kind.kind == "ResourceClaim" and result.get("spec") != current.get("spec"):
                raise ApiStatusError(
                    422, "Invalid", f'ResourceClaim "{name}" is invalid: spec: field is immutable'
                )
            if result.get("spec") != current.get("spec"):
                metadata["generation"] = int(old_meta.get("generation") or 1) + 1
        result["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if result == current:
            return self._out(kind, current, version)  # a no-op write changes nothing
        self._check(kind, version, result, sent=None if subresource else body)
        if dry_run:
            return self._out(kind, result, version)
        result["metadata"]["resourceVersion"] = self._next_version()
        key = (kind.plural, str(old_meta.get("namespace") or ""), name)
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            del self._objects[key]
            self._record(verb, kind, version, result, manager)
            self._emit("DELETED", kind, result)
            return self._out(kind, result, version)
        self._objects[key] = result
        self._record(verb, kind, version, result, manager)
        self._emit("MODIFIED", kind, result)
        return self._out(kind, result, version)

    def _delete(
        self,
        kind: Kind,
        version: str,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any],
        *,
        dry_run: bool = False,
    ) -> JSONObject:
        current = self._current(kind, namespace, name)
        meta = current["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") not in (None, meta["uid"]):
            raise self._conflict(
                kind,
                name,
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {meta['uid']}",
            )
        if preconditions.get("resourceVersion") not in (None, meta["resourceVersion"]):
            raise self._conflict(
                kind,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{preconditions['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        if dry_run:
            return self._out(kind, current, version)
        key = (kind.plural, str(meta.get("namespace") or ""), name)
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["resourceVersion"] = self._next_version()
                self._record("delete", kind, version, current, "")
                self._emit("MODIFIED", kind, current)
            return self._out(kind, current, version)
        del self._objects[key]
        meta["resourceVersion"] = self._next_version()
        self._record("delete", kind, version, current, "")
        self._emit("DELETED", kind, current)
        return self._out(kind, current, version)
