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

With ``--cluster`` it plays neither: it checks a driver already installed on a live
cluster (found like kubectl finds it) by running pods whose claims the cluster's own
scheduler and kubelets handle; the cases live in ``dralet.conformance.cluster``.

Exit status: 0 no MUST case failed (with ``--strict``: no case failed), 1 one did, 2 usage
error, an unreachable API, a driver that never registered, or no devices to allocate;
130 interrupted (with ``--cluster``, after removing what the run created).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from dralet import conformance, errors, releases
from dralet.cdi import store as cdi_store
from dralet.cli import exits, options
from dralet.cli.audit import render_table, wrap_prose
from dralet.conformance import cluster as cluster_conformance
from dralet.conformance.report import Judged
from dralet.kube import access

__all__ = ["ApiChoice", "command", "render_cluster_text", "render_text"]

EXIT_PASSED = exits.OK
EXIT_FAILED = exits.FINDINGS
EXIT_ERROR = exits.BAD_INPUT
STATUS_WORDS = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}
NEWEST_KUBERNETES = releases.newest(conformance.KUBELET_VERSIONS)
LOCAL_NAMESPACE = "default"
CLUSTER_NAMESPACE = "dralet-conformance"
RESTART_TIMEOUT = 120.0
LOCAL_ONLY = (
    "--socket",
    "--registry-dir",
    "--api-url",
    "--serve-api",
    "--write-kubeconfig",
    "--pool",
    "--device",
    "--kubelet-version",
    "--restart-cmd",
)
CLUSTER_ONLY = (
    "--case",
    "--nodes",
    "--device-class",
    "--image",
    "--timeout",
    "--driver-namespace",
    "--driver-selector",
)


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
    summary = _summary(result.cases, must, should, strict=result.strict)
    lines = [
        f"dralet conformance: driver {result.driver} at {result.endpoint}"
        + (f" (kubelet {services})" if services else ""),
        render_table(["CASE", "LEVEL", "KUBELET", "RESULT", "DETAIL"], rows, width=width),
        "",
        summary + ("." if not (must or should) else ""),
    ]
    return wrap_prose(lines, width)


def render_cluster_text(
    result: cluster_conformance.ClusterSuiteResult, *, width: int | None = None
) -> str:
    rows = [
        [c.name, c.level, c.node, STATUS_WORDS[c.status], f"{c.seconds:.1f}", c.message]
        for c in result.cases
    ]
    must, should = result.failed("MUST"), result.failed("SHOULD")
    summary = _summary(result.cases, must, should, strict=result.strict)
    lines = [
        f"dralet conformance --cluster: driver {result.driver} at {result.server}, "
        f"run {result.run_id}",
        render_table(["CASE", "LEVEL", "NODE", "RESULT", "SECONDS", "DETAIL"], rows, width=width),
        "",
        summary + ("." if not (must or should) else ""),
    ]
    if result.leftovers:
        lines.append(f"Left after cleanup: {', '.join(result.leftovers)}.")
    return wrap_prose(lines, width)


async def run_cluster(
    settings: cluster_conformance.ClusterSettings, api: access.ApiAccess
) -> cluster_conformance.ClusterSuiteResult:
    """Connect, run the cluster cases (which clean up after themselves), close."""
    from dralet import kube  # imported here: the API client takes a second to load

    try:
        client = await kube.connect(api_access=api)
    except Exception as exc:  # the config loaders raise many kinds of error
        raise ConformanceError(f"cannot connect to the API server: {exc}") from exc
    try:
        return await cluster_conformance.run_cluster_suite(client, settings)
    except (OSError, TimeoutError) as exc:
        raise ConformanceError(f"the API server is unreachable: {exc}") from exc
    except kube.ApiError as exc:
        raise ConformanceError(f"the API server refused: {exc}") from exc
    finally:
        await client.close()


def _print_rbac() -> None:
    click.echo(yaml.safe_dump_all(cluster_conformance.roles(), sort_keys=False), nl=False)


def _given(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """The options of ``names`` the user set (on the command line or by environment)."""
    by_flag = {f"--{p.name.replace('_', '-')}": p for p in ctx.command.params}
    by_flag.update({o: p for p in ctx.command.params for o in getattr(p, "opts", ())})
    given = []
    for flag in names:
        param = by_flag[flag]
        source = ctx.get_parameter_source(param.name or "")
        if source not in (None, click.core.ParameterSource.DEFAULT):
            given.append(flag)
    return given


def _cluster(
    ctx: click.Context,
    *,
    driver_name: str,
    namespace: str | None,
    nodes: tuple[str, ...],
    device_class: str,
    image: str,
    timeout: float,
    driver_namespace: str,
    driver_selector: str,
    cases: tuple[str, ...],
    kubeconfig: Path | None,
    kube_context: str | None,
    strict: bool,
    output: str,
    junit: Path | None,
) -> None:
    local = _given(ctx, LOCAL_ONLY)
    if local:
        raise click.UsageError(f"--cluster checks an installed driver: no {', '.join(local)}")
    if not driver_name:
        raise click.UsageError("--cluster needs --driver-name (the driver to check)")
    if bool(driver_namespace) != bool(driver_selector):
        raise click.UsageError("--driver-namespace and --driver-selector go together")
    try:
        api = access.resolve(kubeconfig=kubeconfig, context=kube_context)
    except access.ApiAccessError as exc:
        raise exits.BadInput(f"cannot connect to the API server: {exc}") from None
    if api is None:
        raise click.UsageError(
            "--cluster needs a cluster: give --kubeconfig (or set $KUBECONFIG, run in a "
            "pod, or create ~/.kube/config)"
        )
    settings = cluster_conformance.ClusterSettings(
        driver=driver_name,
        nodes=nodes,
        namespace=namespace or CLUSTER_NAMESPACE,
        device_class=device_class,
        image=image,
        driver_namespace=driver_namespace,
        driver_selector=driver_selector,
        timeout=timeout,
        cleanup_timeout=timeout,
        strict=strict,
        cases=cluster_conformance.with_prerequisites(cases),
        progress=lambda message: click.echo(f"dralet conformance: {message}", err=True),
    )
    try:
        result = asyncio.run(run_cluster(settings, api))
    except KeyboardInterrupt:
        click.echo("dralet conformance: interrupted; what the run created is removed", err=True)
        sys.exit(exits.INTERRUPTED)
    except (ConformanceError, cluster_conformance.ClusterSetupError) as exc:
        click.echo(f"dralet conformance: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    _emit(result, output=output, junit=junit, text=render_cluster_text)


def _nodes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    nodes: list[str] = []
    for value in values:
        nodes += [n for n in (v.strip() for v in value.split(",")) if n and n not in nodes]
    return tuple(nodes)


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
@click.option(
    "--namespace",
    default=None,
    help=f"Namespace of the claims [default: {LOCAL_NAMESPACE}; with --cluster: "
    f"{CLUSTER_NAMESPACE}, made and removed by the run if it does not exist].",
)
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
@click.option(
    "--cluster",
    "cluster_mode",
    is_flag=True,
    help="Check a driver installed on a live cluster through pods on its nodes "
    "(needs --driver-name; see docs/conformance.md).",
)
@click.option(
    "--nodes",
    multiple=True,
    callback=_nodes,
    metavar="NODE,...",
    help="With --cluster: nodes to check [default: every node the driver published "
    "ResourceSlices for].",
)
@click.option(
    "--device-class",
    default="",
    help="With --cluster: the DeviceClass to request [default: one made for the run, "
    "selecting every device of the driver].",
)
@click.option(
    "--image",
    default=cluster_conformance.DEFAULT_IMAGE,
    show_default=True,
    help="With --cluster: the probe image (sh, ls, sort, env).",
)
@click.option(
    "--timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="With --cluster: seconds each wait may take (a pod running, a claim released).",
)
@click.option(
    "--driver-namespace",
    default="",
    help="With --cluster: namespace of the driver's pods (for the driver.* cases).",
)
@click.option(
    "--driver-selector",
    default="",
    metavar="SELECTOR",
    help="With --cluster: label selector of the driver's pods (for the driver.* cases).",
)
@click.option(
    "--case",
    "cases",
    multiple=True,
    type=click.Choice(cluster_conformance.CASE_NAMES),
    metavar="CASE",
    help="With --cluster: run only this case (repeat), and the cases it builds on "
    "[default: every case].",
)
@click.option(
    "--print-rbac",
    is_flag=True,
    help="Print the ClusterRoles --cluster needs, as YAML, and exit.",
)
@options.output()
@click.option(
    "--junit", type=click.Path(path_type=Path, dir_okay=False), default=None, help="JUnit XML file."
)
@click.pass_context
def command(
    ctx: click.Context,
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
    namespace: str | None,
    kubelet_versions: tuple[str, ...],
    kubernetes_version: str,
    strict: bool,
    restart_cmd: str | None,
    wait: float,
    cluster_mode: bool,
    nodes: tuple[str, ...],
    device_class: str,
    image: str,
    timeout: float,
    driver_namespace: str,
    driver_selector: str,
    cases: tuple[str, ...],
    print_rbac: bool,
    output: str,
    junit: Path | None,
) -> None:
    """Check any DRA driver's socket as a kubelet would, or (--cluster) a driver
    installed on a live cluster."""
    if print_rbac:
        _print_rbac()
        return
    if cluster_mode:
        _cluster(
            ctx,
            driver_name=driver_name,
            namespace=namespace,
            nodes=nodes,
            device_class=device_class,
            image=image,
            timeout=timeout,
            driver_namespace=driver_namespace,
            driver_selector=driver_selector,
            cases=cases,
            kubeconfig=kubeconfig,
            kube_context=kube_context,
            strict=strict,
            output=output,
            junit=junit,
        )
        return
    cluster_only = _given(ctx, CLUSTER_ONLY)
    if cluster_only:
        raise click.UsageError(f"{', '.join(cluster_only)} go with --cluster")
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
        namespace=namespace or LOCAL_NAMESPACE,
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
    except (ConformanceError, conformance.SetupError, OSError) as exc:
        click.echo(f"dralet conformance: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    _emit(result, output=output, junit=junit, text=render_text)


def _emit(result: Any, *, output: str, junit: Path | None, text: Callable[[Any], str]) -> None:
    """Write the JUnit file, print the result as asked, exit with its verdict."""
    if junit is not None:
        try:
            junit.write_text(result.to_junit_xml())
        except OSError as exc:
            click.echo(f"dralet conformance: {exc}", err=True)
            sys.exit(EXIT_ERROR)
    if output == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(result.to_json(), sort_keys=False), nl=False)
    else:
        click.echo(text(result))
    sys.exit(EXIT_PASSED if result.passed else EXIT_FAILED)


def _summary(
    cases: Sequence[Judged], must: Sequence[str], should: Sequence[str], *, strict: bool
) -> str:
    """``N of M passed`` and the failed cases by level, for either mode's table."""
    passed = sum(1 for c in cases if c.status == "pass")
    summary = f"{passed} of {len(cases)} passed"
    if must:
        summary += f"; MUST failed: {', '.join(must)}"
    if should:
        counted = "" if strict else " (not counted without --strict)"
        summary += f"; SHOULD failed{counted}: {', '.join(should)}"
    return summary
