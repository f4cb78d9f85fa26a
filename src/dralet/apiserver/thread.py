"""An API stand-in on its own event loop in a daemon thread, for synchronous callers."""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from dralet.apiserver.errors import JSONObject
from dralet.apiserver.http import ApiServer
from dralet.apiserver.settings import ApiServerSettings

__all__ = ["ApiServerThread"]

T = TypeVar("T")


class ApiServerThread:
    """An ``ApiServer`` on its own event loop in a daemon thread (sync callers, demos).

    ``start()`` returns the URL; the store helpers run on the server's loop and wait.
    """

    def __init__(self, settings: ApiServerSettings | None = None, **overrides: Any) -> None:
        self.server = ApiServer(settings, **overrides)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._failure: BaseException | None = None

    def __enter__(self) -> ApiServerThread:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="dralet-apiserver", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise RuntimeError("the API stand-in failed to start") from self._failure
        return self.server.url

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        try:
            await self.server.start()
        except Exception as error:
            self._failure = error
            self._ready.set()
            raise
        self._ready.set()
        try:
            await self._done.wait()
        finally:
            await self.server.stop()

    def stop(self) -> None:
        if self._loop is not None and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store helper of the server (e.g. ``server.patch``) on its loop."""
        if self._loop is None:
            raise RuntimeError("the API stand-in is not running")

        async def run() -> T:
            return function(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> JSONObject:
        return self.call(self.server.create, obj, namespace=namespace)

    def get(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject | None:
        return self.call(self.server.get, kind, name, namespace=namespace)

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JSONObject:
        return self.call(
            self.server.patch, kind, name, patch, namespace=namespace, subresource=subresource
        )

    def delete(self, kind: str, name: str, *, namespace: str | None = None) -> JSONObject:
        return self.call(self.server.delete, kind, name, namespace=namespace)

    def list(self, kind: str, **selectors: str) -> builtins.list[JSONObject]:
        return self.call(self.server.list, kind, **selectors)

    def compact(self) -> int:
        return self.call(self.server.compact)

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        return self.server.write_kubeconfig(path, namespace=namespace)
