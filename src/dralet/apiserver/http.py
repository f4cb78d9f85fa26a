"""The stand-in served over HTTP on 127.0.0.1 (aiohttp): the REST paths of the served kinds
with get, list, watch (from a resourceVersion, with bookmarks), create, update, delete,
deletecollection, dry runs, and merge, JSON, strategic-merge (as merge, but for
``metadata.finalizers``, a set) and server-side-apply (as merge) patches; discovery;
failures injected on request. Errors are ``kind: Status`` bodies with
``Content-Type: application/json`` exactly.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from dralet.apiserver import discovery, selectors
from dralet.apiserver.errors import ApiStatusError, JSONObject
from dralet.apiserver.kinds import BY_PLURAL, RESOURCE_GROUP, Kind
from dralet.apiserver.kubeconfig import write_kubeconfig
from dralet.apiserver.patches import apply_list_map, json_patch, merge_patch, strategic_merge_patch
from dralet.apiserver.settings import ApiServerSettings
from dralet.apiserver.store import Store
from dralet.apiserver.validity import device_status_key

__all__ = ["ApiServer"]

log = logging.getLogger("dralet.apiserver")

_JSON = "application/json"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass
class _InjectedFailure:
    code: int
    reason: str
    times: int
    method: str | None
    path_contains: str
    retry_after: float | None


def _go_bool(value: str | None, *, name: str) -> bool:
    if value is None or value == "":
        return False
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise ApiStatusError(400, "BadRequest", f"invalid boolean for {name}: {value!r}")


class ApiServer(Store):
    """The stand-in: a ``Store`` served over HTTP. ``async with ApiServer(...) as server``
    or ``await start()``/``stop()``.

    The store helpers (``create``, ``get``, ``patch``, ``delete``, ``list``, ``compact``)
    act on the store directly, without HTTP; call them from the server's event loop.
    """

    def __init__(self, settings: ApiServerSettings | None = None, **overrides: Any) -> None:
        super().__init__(settings, **overrides)
        self._runner: web.AppRunner | None = None
        self._failures: builtins.list[_InjectedFailure] = []
        self._list_owners: dict[str, dict[Hashable, str]] = {}
        """Per object UID: which field manager applied each item of ResourceClaim
        ``status.devices`` (the one list the stand-in applies as a list map)."""
        self.url = ""

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> str:
        """Listen on 127.0.0.1; the base URL (``http://127.0.0.1:<port>``)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, shutdown_timeout=self.settings.shutdown_timeout, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        """End every watch, then stop listening."""
        self.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """A kubeconfig file pointing at this stand-in (for kubectl and driver processes)."""
        return write_kubeconfig(path, url=self.url, namespace=namespace)

    def inject_failure(
        self,
        code: int,
        *,
        reason: str = "ServiceUnavailable",
        times: int = 1,
        method: str | None = None,
        path_contains: str = "",
        retry_after: float | None = None,
    ) -> None:
        """Answer the next ``times`` matching HTTP requests with ``code`` (and a
        ``Retry-After`` header when given), as an overloaded server would."""
        self._failures.append(
            _InjectedFailure(code, reason, times, method, path_contains, retry_after)
        )

    # -- HTTP ------------------------------------------------------------------------

    def _injected(self, request: web.Request) -> web.Response | None:
        for failure in self._failures:
            if failure.times <= 0:
                continue
            if failure.method not in (None, request.method):
                continue
            if failure.path_contains not in request.path_qs:
                continue
            failure.times -= 1
            response = _json_response(
                ApiStatusError(failure.code, failure.reason, "injected failure").status(),
                status=failure.code,
            )
            if failure.retry_after is not None:
                response.headers["Retry-After"] = f"{failure.retry_after:g}"
            return response
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        injected = self._injected(request)
        if injected is not None:
            return injected
        try:
            return await self._route(request)
        except ApiStatusError as error:
            return _json_response(error.status(), status=error.code)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a stand-in bug: answer like the server would
            log.exception("stand-in failed on %s %s", request.method, request.path)
            failure = ApiStatusError(500, "InternalError", f"stand-in error: {error!r}")
            return _json_response(failure.status(), status=500)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"], ["version", ""]):
            return _json_response(discovery.version_info(self.settings.kubernetes_version))
        if parts == ["api"]:
            return _json_response(discovery.core_versions(self.url))
        if parts == ["apis"]:
            return _json_response(
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [discovery.api_group(self.versions)],
                }
            )
        if parts == ["apis", RESOURCE_GROUP]:
            return _json_response(
                {"kind": "APIGroup", "apiVersion": "v1", **discovery.api_group(self.versions)}
            )
        if parts == ["api", "v1"]:
            return _json_response(discovery.resource_list("", "v1"))
        if len(parts) == 3 and parts[:2] == ["apis", RESOURCE_GROUP]:
            if parts[2] not in self.versions:
                raise ApiStatusError(
                    404, "NotFound", "the server could not find the requested resource"
                )
            return _json_response(discovery.resource_list(RESOURCE_GROUP, parts[2]))
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[:2] == ["apis", RESOURCE_GROUP]:
            group, version, rest = RESOURCE_GROUP, parts[2], parts[3:]
            if version not in self.versions:
                raise ApiStatusError(
                    404, "NotFound", "the server could not find the requested resource"
                )
        else:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in BY_PLURAL or BY_PLURAL[rest[0]].group != group:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        kind = BY_PLURAL[rest[0]]
        if not kind.namespaced and namespace is not None:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and (subresource != "status" or not kind.status_subresource):
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if name is None:
            return await self._collection(request, kind, version, namespace)
        if kind.namespaced and namespace is None:
            raise ApiStatusError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return await self._item(request, kind, version, namespace, name, subresource)

    async def _collection(
        self, request: web.Request, kind: Kind, version: str, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        dry_run = query.get("dryRun") == "All"
        if request.method == "GET":
            if _go_bool(query.get("watch"), name="watch"):
                return await self._watch(request, kind, version, namespace)
            items = self.list(
                kind.kind,
                namespace=namespace,
                label_selector=query.get("labelSelector", ""),
                field_selector=query.get("fieldSelector", ""),
                version=version,
            )
            for item in items:  # like the real server, list items carry no kind/apiVersion
                item.pop("kind", None)
                item.pop("apiVersion", None)
            return _json_response(
                {
                    "kind": f"{kind.kind}List",
                    "apiVersion": self._api_version(kind, version),
                    "metadata": {"resourceVersion": str(self._resource_version)},
                    "items": items,
                }
            )
        if request.method == "POST":
            body = await _read_json(request)
            created = self._create(
                kind,
                version,
                namespace,
                body,
                manager=query.get("fieldManager", ""),
                dry_run=dry_run,
            )
            return _json_response(created, status=201)
        if request.method == "DELETE":
            matches = selectors.matcher(
                kind, query.get("labelSelector", ""), query.get("fieldSelector", "")
            )
            deleted = []
            for obj in self._select(kind, namespace):
                if matches(obj):
                    meta = obj["metadata"]
                    deleted.append(
                        self._delete(
                            kind, version, meta.get("namespace"), meta["name"], {}, dry_run=dry_run
                        )
                    )
            return _json_response(
                {
                    "kind": f"{kind.kind}List",
                    "apiVersion": self._api_version(kind, version),
                    "metadata": {"resourceVersion": str(self._resource_version)},
                    "items": deleted,
                }
            )
        raise ApiStatusError(405, "MethodNotAllowed", f"{request.method} is not supported here")

    async def _item(
        self,
        request: web.Request,
        kind: Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
    ) -> web.StreamResponse:
        query = request.query
        dry_run = query.get("dryRun") == "All"
        manager = query.get("fieldManager", "")
        if request.method == "GET":
            return _json_response(self._out(kind, self._current(kind, namespace, name), version))
        if request.method == "PUT":
            body = await _read_json(request)
            current = self._current(kind, namespace, name)
            return _json_response(
                self._update(
                    kind,
                    version,
                    current,
                    body,
                    subresource,
                    verb="update",
                    manager=manager,
                    dry_run=dry_run,
                )
            )
        if request.method == "PATCH":
            return await self._patch_request(
                request, kind, version, namespace, name, subresource, manager, dry_run=dry_run
            )
        if request.method == "DELETE" and not subresource:
            options = await _read_json(request) if request.can_read_body else {}
            return _json_response(
                self._delete(kind, version, namespace, name, options, dry_run=dry_run)
            )
        raise ApiStatusError(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _applier(
        self, kind: Kind, subresource: str, applied: dict[str, Any], manager: str
    ) -> Callable[[Any], Any]:
        """How an apply changes the object: a merge, except a claim's ``status.devices``,
        a list map whose items belong to the manager that applied them."""
        devices = (applied.get("status") or {}).get("devices")
        if kind.kind != "ResourceClaim" or subresource != "status" or devices is None:
            return lambda current: merge_patch(current, applied)
        rest = {**applied, "status": {k: v for k, v in applied["status"].items() if k != "devices"}}

        def change(current: Any) -> Any:
            owners = self._list_owners.setdefault(str(current["metadata"]["uid"]), {})
            merged = merge_patch(current, rest)
            status = dict(merged.get("status") or {})
            status["devices"] = apply_list_map(
                status.get("devices") or [],
                devices,
                key=device_status_key,
                manager=manager,
                owners=owners,
            )
            if not status["devices"]:
                del status["devices"]
            return {**merged, "status": status}

        return change

    async def _patch_request(
        self,
        request: web.Request,
        kind: Kind,
        version: str,
        namespace: str | None,
        name: str,
        subresource: str,
        manager: str,
        *,
        dry_run: bool,
    ) -> web.StreamResponse:
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        raw = await request.read()
        if content_type == "application/apply-patch+yaml":
            if not manager:
                raise ApiStatusError(
                    400, "BadRequest", "PATCH with apply requires a fieldManager query parameter"
                )
            try:
                applied = yaml.safe_load(raw) or {}
            except yaml.YAMLError as error:
                raise ApiStatusError(
                    400, "BadRequest", f"cannot parse apply body: {error}"
                ) from error
            if not isinstance(applied, dict):
                raise ApiStatusError(400, "BadRequest", "the apply body must be an object")
            stored = self._objects.get((kind.plural, namespace or "", name))
            if stored is None and subresource:
                raise ApiStatusError(404, "NotFound", f'{kind.plural} "{name}" not found')
            if stored is not None:
                wanted_uid = (applied.get("metadata") or {}).get("uid")
                if wanted_uid and wanted_uid != stored["metadata"]["uid"]:
                    raise ApiStatusError(
                        422,
                        "Invalid",
                        f'{kind.kind} "{name}" is invalid: metadata.uid: Invalid value: '
                        f'"{wanted_uid}": field is immutable',
                    )
            if stored is None:
                metadata = {**(applied.get("metadata") or {}), "name": name}
                return _json_response(
                    self._create(
                        kind,
                        version,
                        namespace,
                        {**applied, "metadata": metadata},
                        manager=manager,
                        dry_run=dry_run,
                        verb="apply",
                    ),
                    status=201,
                )
            return _json_response(
                self._patch(
                    kind,
                    version,
                    namespace,
                    name,
                    subresource,
                    self._applier(kind, subresource, applied, manager),
                    verb="apply",
                    manager=manager,
                    dry_run=dry_run,
                )
            )
        try:
            patch = json.loads(raw)
        except ValueError as error:
            raise ApiStatusError(400, "BadRequest", f"the patch is not JSON: {error}") from error
        change: Callable[[Any], Any]
        if content_type == "application/json-patch+json":
            if not isinstance(patch, list):
                raise ApiStatusError(400, "BadRequest", "a JSON patch must be a list")
            change = lambda current: json_patch(current, patch)  # noqa: E731
        elif content_type in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            if not isinstance(patch, dict):
                raise ApiStatusError(400, "BadRequest", "a merge patch must be an object")
            merge = (
                strategic_merge_patch
                if content_type == "application/strategic-merge-patch+json"
                else merge_patch
            )
            change = lambda current: merge(current, patch)  # noqa: E731
        else:
            raise ApiStatusError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        return _json_response(
            self._patch(
                kind,
                version,
                namespace,
                name,
                subresource,
                change,
                verb="patch",
                manager=manager,
                dry_run=dry_run,
            )
        )

    async def _watch(
        self, request: web.Request, kind: Kind, version: str, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        matches = selectors.matcher(
            kind, query.get("labelSelector", ""), query.get("fieldSelector", "")
        )
        bookmarks = _go_bool(query.get("allowWatchBookmarks"), name="allowWatchBookmarks")
        timeout = float(query.get("timeoutSeconds") or self.settings.watch_timeout_default)
        since = query.get("resourceVersion", "")
        response = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            watcher = self.subscribe(kind, namespace, matches, since)
        except ApiStatusError as gone:  # 410 Expired comes as a watch event
            await _send_event(response, "ERROR", gone.status())
            await response.write_eof()
            return response
        try:
            async with asyncio.timeout(timeout):
                while True:
                    item_ = await watcher.queue.get()
                    if item_ is None:
                        break
                    event, obj = item_
                    meta = obj.get("metadata") or {}
                    if namespace is not None and meta.get("namespace") != namespace:
                        continue
                    if not matches(obj):
                        continue
                    await _send_event(response, event, self._out(kind, obj, version))
        except TimeoutError:
            if bookmarks:
                await _send_event(
                    response,
                    "BOOKMARK",
                    {
                        "kind": kind.kind,
                        "apiVersion": self._api_version(kind, version),
                        "metadata": {"resourceVersion": str(self._resource_version)},
                    },
                )
        except (ConnectionResetError, RuntimeError):
            return response
        finally:
            self.unsubscribe(watcher)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response


def _json_response(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={"Content-Type": _JSON}
    )


async def _read_json(request: web.Request) -> JSONObject:
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ApiStatusError(400, "BadRequest", f"the body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
    return body


async def _send_event(response: web.StreamResponse, event: str, obj: Mapping[str, Any]) -> None:
    await response.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")
