"""Where requests go and how they are authenticated: the API server's URL, the TLS context
and the ``Authorization`` header, loaded once from an ``access.ApiAccess``.

The client sends requests on plain aiohttp with what this module loads; the official
client is not imported for the common kinds of access (why: ``dralet.kube.client``).
Read here:

- the pod's service account, as client-go's ``rest.InClusterConfig`` does
  (k8s.io/client-go@v0.37.2 rest/config.go): ``https://$KUBERNETES_SERVICE_HOST:
  $KUBERNETES_SERVICE_PORT``, the CA and token files of the mounted service account, the
  token re-read once a minute as the kubelet rotates it (the period of
  ``NewCachedFileTokenSource``, transport/token_source.go);
- kubeconfig files, merged as client-go merges them (tools/clientcmd/loader.go,
  ``Load``: the first file to set a map key or the current context wins; relative paths
  are resolved against the file that holds them), for a user with a client certificate,
  a token or a token file.

A user that authenticates another way (an ``exec`` credential plugin, an
``auth-provider``, a username and password) is loaded by the official client's
kubeconfig loader, imported only then, whose configuration then gives the header per
request (an exec plugin's credential is refreshed by its hook).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dralet.kube import access

__all__ = ["Transport", "load"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""How long a token read from a file is used before the file is read again."""

_SIMPLE_USER_KEYS = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "extensions",
    }
)
"""kubeconfig user fields loaded here; a user with any other field (``exec``,
``auth-provider``, ``username``, impersonation) goes through the official loader."""

AuthHeaders = Callable[[], Awaitable[Mapping[str, str]]]


async def _no_auth() -> Mapping[str, str]:
    return {}


@dataclass
class Transport:
    """The base URL, TLS context, proxy and auth of every request to one API server."""

    host: str
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    """The name the server's certificate is checked against, when not the URL's host."""
    proxy: str | None = None
    auth_headers: AuthHeaders = field(default=_no_auth)
    """The headers that authenticate one request (``Authorization``, impersonation)."""


class _FileToken:
    """A bearer token read from a file, re-read after ``TOKEN_REREAD_SECONDS``; while the
    file cannot be read, the token read before (or ``initial``) is used."""

    def __init__(
        self, path: Path, *, initial: str = "", clock: Callable[[], float] | None = None
    ) -> None:
        self.path = path
        self.clock = clock if clock is not None else time.monotonic
        self._token = initial
        self._read_at: float | None = None

    def value(self) -> str:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= TOKEN_REREAD_SECONDS:
            try:
                self._token = self.path.read_text().strip()
            except OSError:
                if not self._token:
                    raise
                # A token being rotated in: the one read before is still valid a while.
            self._read_at = now
        return self._token


def _bearer(token: Callable[[], str]) -> AuthHeaders:
    async def headers() -> Mapping[str, str]:
        return {"Authorization": f"Bearer {token()}"}

    return headers


def _env_proxy(host: str) -> str | None:
    """The proxy the environment names for ``host`` (``HTTPS_PROXY``, ``NO_PROXY``), as
    Go's ``http.ProxyFromEnvironment`` that client-go uses; looked up once, not per
    request."""
    parts = urlsplit(host)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _ssl_context(
    *,
    ca_file: str | None = None,
    ca_data: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    cert_data: bytes | None = None,
    key_data: bytes | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if cert_data is not None or key_data is not None:
        # ssl loads a client certificate from files only: written to a private
        # directory for the one call and removed.
        with tempfile.TemporaryDirectory(prefix="dralet-tls-") as folder:
            cert_path = Path(folder) / "client.crt"
            key_path = Path(folder) / "client.key"
            cert_path.write_bytes(
                cert_data if cert_data is not None else Path(cert_file or "").read_bytes()
            )
            key_path.write_bytes(
                key_data if key_data is not None else Path(key_file or "").read_bytes()
            )
            context.load_cert_chain(str(cert_path), str(key_path))
    elif cert_file:
        context.load_cert_chain(cert_file, key_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def in_cluster(
    environ: Mapping[str, str] | None = None, directory: Path | None = None
) -> Transport:
    """The pod's service account (its files in ``directory``, by default where the
    kubelet mounts them). Raises ``access.ApiAccessError`` outside a pod."""
    env = os.environ if environ is None else environ
    directory = SERVICE_ACCOUNT_DIR if directory is None else directory
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise access.ApiAccessError(
            "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
        )
    if ":" in host:  # an IPv6 address, bracketed as net.JoinHostPort does
        host = f"[{host}]"
    token = _FileToken(directory / "token")
    try:
        token.value()
        context = _ssl_context(ca_file=str(directory / "ca.crt"))
    except (OSError, ssl.SSLError) as exc:
        raise access.ApiAccessError(f"in-cluster: {exc}") from exc
    url = f"https://{host}:{port}"
    return Transport(url, context, proxy=_env_proxy(url), auth_headers=_bearer(token.value))


# ------------------------------------------------------------------ kubeconfig


def _named(items: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for item in items or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            yield item["name"], item


@dataclass
class _Merged:
    """Merged kubeconfig files: each named cluster, user and context with the folder of
    the file that defined it (its relative paths are relative to that folder)."""

    current_context: str = ""
    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)


def _merge(paths: list[Path]) -> _Merged:
    import yaml  # only a kubeconfig needs it

    merged = _Merged()
    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise access.ApiAccessError(f"{path}: not a kubeconfig")
        folder = path.resolve().parent
        merged.current_context = merged.current_context or str(loaded.get("current-context") or "")
        for name, item in _named(loaded.get("clusters")):
            merged.clusters.setdefault(name, (item.get("cluster") or {}, folder))
        for name, item in _named(loaded.get("users")):
            merged.users.setdefault(name, (item.get("user") or {}, folder))
        for name, item in _named(loaded.get("contexts")):
            merged.contexts.setdefault(name, item.get("context") or {})
    return merged


def _path(value: Any, folder: Path) -> str | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else folder / path)


def _data(value: Any) -> bytes | None:
    return base64.b64decode(str(value)) if value else None


class _NeedsOfficialLoader(Exception):
    """The kubeconfig user authenticates in a way only the official loader knows."""


class _LoaderError(Exception):
    """The official loader refused the kubeconfig (its ``ConfigException``)."""


def _from_kubeconfig(paths: list[Path], context_name: str | None) -> Transport:
    merged = _merge(paths)
    name = context_name or merged.current_context
    if not name or name not in merged.contexts:
        raise access.ApiAccessError(f"kubeconfig: no context {name!r}")
    context = merged.contexts[name]
    cluster_name, user_name = str(context.get("cluster") or ""), str(context.get("user") or "")
    if cluster_name not in merged.clusters:
        raise access.ApiAccessError(f"kubeconfig: context {name!r}: no cluster {cluster_name!r}")
    cluster, cluster_folder = merged.clusters[cluster_name]
    user, user_folder = merged.users.get(user_name, ({}, Path()))
    if set(user) - _SIMPLE_USER_KEYS or cluster.get("proxy-url"):
        raise _NeedsOfficialLoader
    host = str(cluster.get("server") or "").rstrip("/")
    if not host:
        raise access.ApiAccessError(f"kubeconfig: cluster {cluster_name!r} has no server")
    tls: ssl.SSLContext | None = None
    if host.startswith("https://"):
        ca_data = _data(cluster.get("certificate-authority-data"))
        tls = _ssl_context(
            ca_file=_path(cluster.get("certificate-authority"), cluster_folder),
            ca_data=ca_data.decode() if ca_data is not None else None,
            cert_file=_path(user.get("client-certificate"), user_folder),
            key_file=_path(user.get("client-key"), user_folder),
            cert_data=_data(user.get("client-certificate-data")),
            key_data=_data(user.get("client-key-data")),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
        )
    # A token file, re-read, wins over a token once read (k8s.io/client-go@v0.37.2
    # rest/config.go, ``BearerTokenFile``).
    auth: AuthHeaders = _no_auth
    token = str(user.get("token") or "")
    if user.get("tokenFile"):
        file_token = _FileToken(Path(_path(user["tokenFile"], user_folder) or ""), initial=token)
        file_token.value()
        auth = _bearer(file_token.value)
    elif token:
        auth = _bearer(lambda: token)
    server_name = cluster.get("tls-server-name")
    return Transport(
        host,
        tls,
        server_hostname=str(server_name) if server_name else None,
        proxy=_env_proxy(host),
        auth_headers=auth,
    )


async def _from_official_loader(api_access: access.ApiAccess) -> Transport:
    """The official client's loader, for the kinds of auth it alone knows."""
    from kubernetes.aio import config as official_config
    from kubernetes.aio.client import Configuration

    loader: Any = official_config
    configuration: Any = Configuration()
    try:
        await loader.load_kube_config(
            config_file=api_access.kubeconfig,
            context=api_access.context,
            client_configuration=configuration,
            persist_config=False,
        )
    except loader.ConfigException as exc:
        raise _LoaderError(str(exc)) from exc
    context = _ssl_context(
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        insecure=not configuration.verify_ssl,
    )

    async def headers() -> Mapping[str, str]:
        found: dict[str, str] = {}
        for setting in (await configuration.auth_settings()).values():
            if setting.get("in") == "header" and setting.get("value"):
                found[str(setting["key"])] = str(setting["value"])
        return found

    host = str(configuration.host).rstrip("/")
    return Transport(
        host,
        context,
        server_hostname=getattr(configuration, "tls_server_name", None) or None,
        proxy=configuration.proxy or _env_proxy(host),
        auth_headers=headers,
    )


async def load(api_access: access.ApiAccess) -> Transport:
    """The transport ``api_access`` describes. Raises ``access.ApiAccessError`` when it
    cannot be loaded (a broken kubeconfig, a missing certificate)."""
    if api_access.kind == "url":
        host = (api_access.url or "").rstrip("/")
        return Transport(host, proxy=_env_proxy(host))
    if api_access.kind == "in-cluster":
        return in_cluster()
    paths = [Path(p) for p in (api_access.kubeconfig or "").split(os.pathsep) if p]
    try:
        try:
            return _from_kubeconfig(paths, api_access.context)
        except _NeedsOfficialLoader:
            return await _from_official_loader(api_access)
    except access.ApiAccessError as exc:
        raise access.ApiAccessError(f"{api_access.describe()}: {exc}") from exc
    except (OSError, ValueError, ssl.SSLError, _LoaderError) as exc:
        text = str(exc).strip()
        first_line = text.splitlines()[0] if text else repr(exc)
        raise access.ApiAccessError(f"{api_access.describe()}: {first_line}") from exc
