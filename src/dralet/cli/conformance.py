"""``dralet conformance``: play the kubelet against any DRA driver and check named cases.

The driver is found by its registration socket (``--socket``) or by watching a
registry directory as the kubelet does (``--registry-dir``; start conformance first
and the driver second to check the registration order from the very first GetInfo).
Claims are created in an API server the driver reads: an existing one
(``--api-url`` without auth, or ``--kubeconfig``), or an API stand-in that
conformance starts itself (``--serve-api HOST:PORT``), writing a kubeconfig for the
driver to ``--write-kubeconfig`` (its directory is made). Devices to allocate come from
``--device`` or from the ResourceSlice the driver publishes for the node. The cases live
in ``dralet.conformance``.

Exit status: 0 no MUST case failed (with ``--strict``: no case failed), 1 one did, 2 usage
error, an unreachable API, a driver that never registered, or no devices to allocate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from dralet import conformance, errors, releases
from dralet.cdi import store as cdi_store
from dralet.cli import exits, options
from dralet.cli.audit import render_table, wrap_prose
from dralet.kube import access

__all__ = ["ApiChoice", "command", "render_text"]

EXIT_PASSED = exits.OK
EXIT_FAILED = exits.FINDINGS
EXIT_ERROR = exits.BAD_INPUT
STATUS_WORDS = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}
NEWEST_KUBERNETES = releases.newest(conformance.KUBELET_VERSIONS)
RESTART_TIMEOUT = 120.0


class ConformanceError(Exception):
    """The suite could not run (API unreachable, files not writable): exit status 2."""


@dataclass(frozen=True)
class ApiChoice:
    """Where the claims go: one of these is set."""

    api: access.ApiAccess | None = None
    """An existing API server, resolved like kubectl does."""
    serve: str | None = None
    """HOST:PORT for an API stand-in started here (port 0 picks one)."""
    write_kubeconfig: Path | None = None
    """With ``serve``: the kubeconfig file for the driver."""
    kubernetes_version: str = NEWEST_KUBERNETES
    """The stand-in's Kubernetes version (served resource.k8s.io versions)."""


@contextlib.asynccontextmanager
async def _stand_in(choice: ApiChoice, *, node_name: str) -> AsyncIterator[str | None]:
    if choice.serve is None:
        yield None
        return
    from dralet.apiserver import ApiServer  # imported here: schemas load slowly

    host, _, port = choice.serve.rpartition(":")
    server = ApiServer(
        host=host or "127.0.0.1",
        port=int(port),
        kubernetes_version=choice.kubernetes_version,
    )
    try:
        await server.start()
    except OSError as exc:
        raise ConformanceError(f"cannot serve the API stand-in on {choice.serve}: {exc}") from exc
    try:
        server.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}})
        assert choice.write_kubeconfig is not None
        choice.write_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        server.write_kubeconfig(choice.write_kubeconfig)
        click.echo(
            f"dralet conformance: API stand-in at {server.url}; "
            f"kubeconfig for the driver: {choice.write_kubeconfig}",
            err=True,
        )
        yield server.url
    finally:
        await server.stop()


async def run(settings: conformance.ConformanceSettings, choice: ApiChoice) -> Any:
    """Connect (or start the stand-in), run the suite, close everything."""
    from dralet import kube  # imported here: the API client takes a second to load

    async with _stand_in(choice, node_name=settings.node_name) as served_url:
        try:
            if served_url:
                client = await kube.connect(url=served_url)
            else:
                client = await kube.connect(api_access=choice.api)
        except Exception as exc:  # the config loaders raise many kinds of error
            raise ConformanceError(f"cannot connect to the API server: {exc}") from exc
        try:
            factory = conformance.ApiClaimFactory(
                client, node_name=settings.node_name, namespace=settings.namespace
            )
            try:
                await kube.negotiate_resource_version(client)
            except (OSError, TimeoutError, errors.DraletError) as exc:
                raise ConformanceError(f"the API server does not serve DRA: {exc}") from exc
            return await conformance.run_suite(settings, claims=factory)
        finally:
            await client.close()


def shell_restart(command: str) -> Callable[[], Awaitable[None]]:
    """Run ``command`` in a shell to restart the driver; it must return once the old
    process is gone (a driver it starts in the background is then waited for)."""

    async def restart() -> None:
        process = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            code = await asyncio.wait_for(process.wait(), RESTART_TIMEOUT)
        except TimeoutError:
            process.kill()
            raise ConformanceError(
                f"--restart-cmd did not return within {RESTART_TIMEOUT:g}s"
            ) from None
        if code != 0:
            raise ConformanceError(f"--restart-cmd exited with status {code}")

    return restart


def render_text(result: conformance.SuiteResult, *, width: int | None = None) -> str:
    rows = [
        [c.name, c.level, c.kubelet or "-", STATUS_WORDS[c.status], c.message] for c in result.cases
    ]
    must, should = result.failed("MUST"), result.failed("SHOULD")
    services = ", ".join(f"{k}: {s}" for k, s in result.services)
    passed = sum(1 for c in result.cases if c.status == "pass")
    summary = f"{passed} of {len(result.cases)} passed"
    if must:
        summary += f"; MUST failed: {', '.join(must)}"
    if should:
        counted = "" if result.strict else " (not counted without --strict)"
        summary += f"; SHOULD failed{counted}: {', '.join(should)}"
    lines = [
        f"dralet conformance: driver {result.driver} at {result.endpoint}"
        + (f" (kubelet {services})" if services else ""),
        render_table(["CASE", "LEVEL", "KUBELET", "RESULT", "DETAIL"], rows, width=width),
        "",
        summary + ("." if not (must or should) else ""),
    ]
    return wrap_prose(lines, width)


def _kubelet_versions(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    versions: list[str] = []
    for value in values:
        for version in filter(None, (v.strip() for v in value.split(","))):
            if version not in conformance.KUBELET_VERSIONS:
                known = ", ".join(conformance.KUBELET_VERSIONS)
                raise click.BadParameter(f"{version!r} is not one of {known}")
            if version not in versions:
                versions.append(version)
    return tuple(versions)


@click.command(
    "conformance",
    epilog=exits.epilog(
        "a MUST case failed (with --strict: any case)",
        bad_input="a driver that never registered, no devices to allocate",
    ),
)
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The driver's registration socket.",
)
@click.option(
    "--registry-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Watch this directory for the registration socket, as the kubelet does.",
)
@click.option("--driver-name", default="", help="Expected driver name [default: from GetInfo].")
@click.option(
    "--cdi-dir",
    type=click.Path(path_type=Path),
    default=cdi_store.DEFAULT_CDI_DIR,
    show_default=True,
)
@options.api_access(in_cluster=False)
@click.option(
    "--serve-api",
    metavar="HOST:PORT",
    default=None,
    help="Start an API stand-in here (port 0 picks one) for the driver to read.",
)
@click.option(
    "--write-kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="With --serve-api: write the driver's kubeconfig to this file.",
)
@click.option("--node-name", envvar="NODE_NAME", default="node-a", show_default=True)
@click.option(
    "--pool",
    default="",
    help="Pool of the devices [default: the published slice's pool, else the node name].",
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    help="A device of the pool to allocate (repeat; two recommended) "
    "[default: the first two the driver published for the node].",
)
@click.option("--namespace", default="default", show_default=True)
@click.option(
    "--kubelet-version",
    "kubelet_versions",
    multiple=True,
    callback=_kubelet_versions,
    metavar="1.32,1.34,...",
    help="Kubelets to play (repeat or comma-separate) [default: every version the "
    "driver's GetInfo makes usable]; one it does not advertise is skipped with the reason.",
)
@click.option(
    "--kubernetes-version",
    type=click.Choice(conformance.KUBELET_VERSIONS),
    default=NEWEST_KUBERNETES,
    show_default=True,
    help="With --serve-api: the stand-in's Kubernetes version.",
)
@click.option("--strict", is_flag=True, help="SHOULD failures fail the run too.")
@click.option(
    "--restart-cmd",
    default=None,
    metavar="COMMAND",
    help="Shell command that restarts the driver (e.g. kill -9, then start it); "
    "enables the restart cases.",
)
@click.option(
    "--wait",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the driver to register (and to publish its devices).",
)
@options.output()
@click.option(
    "--junit", type=click.Path(path_type=Path, dir_okay=False), default=None, help="JUnit XML file."
)
def command(
    socket_path: Path | None,
    registry_dir: Path | None,
    driver_name: str,
    cdi_dir: Path,
    kubeconfig: Path | None,
    kube_context: str | None,
    api_url: str | None,
    serve_api: str | None,
    write_kubeconfig: Path | None,
    node_name: str,
    pool: str,
    devices: tuple[str, ...],
    namespace: str,
    kubelet_versions: tuple[str, ...],
    kubernetes_version: str,
    strict: bool,
    restart_cmd: str | None,
    wait: float,
    output: str,
    junit: Path | None,
) -> None:
    """Check any DRA driver's socket as a kubelet would."""
    if (socket_path is None) == (registry_dir is None):
        raise click.UsageError("give exactly one of --socket and --registry-dir")
    if serve_api is not None and (api_url or kubeconfig or kube_context):
        raise click.UsageError(
            "--serve-api starts its own API: no --api-url, --kubeconfig or --context"
        )
    if api_url is not None and (kubeconfig or kube_context):
        raise click.UsageError(
            "claims need an API server: --api-url, or --kubeconfig/--context, not both"
        )
    api: access.ApiAccess | None = None
    if serve_api is None:
        try:
            api = access.resolve(url=api_url, kubeconfig=kubeconfig, context=kube_context)
        except access.ApiAccessError as exc:
            raise exits.BadInput(f"cannot connect to the API server: {exc}") from None
        if api is None:
            raise click.UsageError(
                "claims need an API server: give --serve-api, --api-url or --kubeconfig "
                "(or set $KUBECONFIG, or create ~/.kube/config)"
            )
    if (serve_api is None) != (write_kubeconfig is None):
        raise click.UsageError("--serve-api and --write-kubeconfig go together")
    if serve_api is not None and not serve_api.rpartition(":")[2].isdigit():
        raise click.UsageError(f"--serve-api: expected HOST:PORT, got {serve_api!r}")
    settings = conformance.ConformanceSettings(
        registration_socket=socket_path.absolute() if socket_path else None,
        registry_dir=registry_dir.absolute() if registry_dir else None,
        driver_name=driver_name,
        cdi_dir=cdi_dir.absolute(),
        node_name=node_name,
        pool=pool,
        devices=devices,
        namespace=namespace,
        kubelet_versions=kubelet_versions,
        strict=strict,
        restart=shell_restart(restart_cmd) if restart_cmd else None,
        progress=lambda message: click.echo(f"dralet conformance: {message}", err=True),
        discovery_timeout=wait,
    )
    choice = ApiChoice(
        api=api,
        serve=serve_api,
        write_kubeconfig=write_kubeconfig,
        kubernetes_version=kubernetes_version,
    )
    try:
        result: conformance.SuiteResult = asyncio.run(run(settings, choice))
        if junit is not None:
            junit.write_text(result.to_junit_xml())
    except (ConformanceError, conformance.SetupError, OSError) as exc:
        click.echo(f"dralet conformance: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    if output == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(result.to_json(), sort_keys=False), nl=False)
    else:
        click.echo(render_text(result))
    sys.exit(EXIT_PASSED if result.passed else EXIT_FAILED)
