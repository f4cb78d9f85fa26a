"""``dralet run``: run a driver on this node (the DaemonSet entrypoint)."""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from dralet import errors, logs
from dralet.drivers import example
from dralet.kube import access
from dralet.kube.claims import ClaimClient
from dralet.kube.client import connect
from dralet.kube.events import NodeEvents
from dralet.metrics import DriverMetrics
from dralet.node import directories
from dralet.node.backend import DeviceBackend
from dralet.node.devices import TaintEffect
from dralet.node.publisher import PublisherSettings, SlicePublisher
from dralet.node.runner import BackgroundWork, Driver
from dralet.node.settings import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR, DriverSettings

__all__ = ["RunOptions", "command", "serve"]

log = logging.getLogger("dralet.run")

_TAINT_EFFECTS: dict[str, TaintEffect | None] = {
    "NoSchedule": "NoSchedule",
    "NoExecute": "NoExecute",
    "None": "None",
    "off": None,
}


@dataclass(frozen=True)
class RunOptions:
    """Everything ``dralet run`` needs beyond the driver settings."""

    driver: str
    state_dir: Path
    gpus: int
    api: access.ApiAccess | None
    """None only with ``--standalone``: no claims can be read, nothing is published."""
    publish: bool
    publisher: PublisherSettings = field(default_factory=PublisherSettings)
    prepare_delay: tuple[tuple[str, float], ...] = ()


DRIVERS = ("example", "example-strict")
"""``example-strict``: the example GPUs behind ``dralet.testing.strict.StrictBackend``, which
records every broken backend promise in ``<state-dir>/strict`` (the crash suite's check)."""


def _backend(options: RunOptions, settings: DriverSettings) -> DeviceBackend:
    if options.driver not in DRIVERS:
        raise click.BadParameter(
            f"unknown driver {options.driver!r} (available: {', '.join(DRIVERS)})"
        )
    gpus = example.SimulatedGPUs(
        state_dir=options.state_dir,
        node_name=settings.node_name,
        count=options.gpus,
        prepare_delay=dict(options.prepare_delay),
    )
    if options.driver == "example-strict":
        from dralet.testing.strict import StrictBackend

        return StrictBackend(state_dir=options.state_dir / "strict", inner=gpus)
    return gpus


async def serve(settings: DriverSettings, options: RunOptions) -> None:
    """Run the driver until SIGTERM."""
    metrics = DriverMetrics()
    for note in directories.prepare_directories(settings):  # before the backend's own setup
        log.warning("%s", note)
    backend = _backend(options, settings)
    if options.api is None:
        log.warning(
            "standalone: no Kubernetes API, so every NodePrepareResources fails (claims "
            "cannot be read), no ResourceSlices are published and no finalizers are set"
        )
        await Driver(settings, backend, metrics=metrics).run()
        return
    log.info("Kubernetes API: %s", options.api.describe())
    async with await connect(api_access=options.api, metrics=metrics) as client:
        events = NodeEvents(client, driver=settings.driver_name, node_name=settings.node_name)
        background: dict[str, BackgroundWork] = {}
        ready_after: tuple[asyncio.Event, ...] = ()
        if options.publish:
            publisher = SlicePublisher(
                client,
                backend,
                driver=settings.driver_name,
                node_name=settings.node_name,
                pool=settings.pool_name,
                settings=options.publisher,
                metrics=metrics,
                events=events,
            )
            background["resourceslices"] = publisher.run
            ready_after = (publisher.published,)
        driver = Driver(
            settings,
            backend,
            claims=ClaimClient(client),
            metrics=metrics,
            background=background,
            events=events,
            ready_after=ready_after,
        )
        await driver.run()


def _gate(item: str) -> tuple[str, bool]:
    gate, _, value = item.partition("=")
    if value.lower() not in ("true", "false") or not gate:
        raise click.BadParameter(f"expected GATE=true|false, got {item!r}")
    return gate, value.lower() == "true"


def _delay(item: str) -> tuple[str, float]:
    device, _, seconds = item.partition("=")
    try:
        return device, float(seconds)
    except ValueError:
        raise click.BadParameter(f"expected DEVICE=SECONDS, got {item!r}") from None


@click.command("run")
@click.option(
    "--driver",
    default="example",
    show_default=True,
    help="Backend to run: example, or example-strict (checked by the strict test backend).",
)
@click.option("--driver-name", default=example.DRIVER_NAME, show_default=True)
@click.option("--node-name", envvar="NODE_NAME", required=True, help="This node ($NODE_NAME).")
@click.option(
    "--plugin-dir",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Plugin data dir [default: {KUBELET_PLUGINS_DIR}/<driver-name>].",
)
@click.option(
    "--registry-dir",
    type=click.Path(path_type=Path),
    default=KUBELET_REGISTRY_DIR,
    show_default=True,
)
@click.option(
    "--cdi-dir", type=click.Path(path_type=Path), default=Path("/var/run/cdi"), show_default=True
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Backend state dir [default: <plugin-dir>/backend].",
)
@click.option("--gpus", type=int, default=4, show_default=True, help="Simulated GPUs (example).")
@click.option(
    "--pod-uid",
    default="",
    help="Per-instance socket names for rolling updates (Kubernetes >= 1.33).",
)
@click.option("--api-url", default=None, help="API server URL without auth (test stand-ins).")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    default=None,
    help="Kubeconfig file [default: $KUBECONFIG, then in-cluster, then ~/.kube/config].",
)
@click.option("--context", "kube_context", default=None, help="Kubeconfig context to use.")
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@click.option(
    "--standalone",
    is_flag=True,
    help="Run with no Kubernetes API (claims cannot be read; for socket-level tests only).",
)
@click.option(
    "--publish/--no-publish",
    default=True,
    show_default=True,
    help="Publish ResourceSlices for this node's devices.",
)
@click.option(
    "--feature-gate",
    "feature_gates",
    multiple=True,
    metavar="GATE=true|false",
    help="A DRA feature gate the cluster sets differently from its release's default "
    "(e.g. DRADeviceTaints=true on 1.35); decides which optional device fields are published.",
)
@click.option(
    "--unhealthy-taint-effect",
    type=click.Choice(["NoSchedule", "NoExecute", "None", "off"]),
    default="NoSchedule",
    show_default=True,
    help="Taint put on devices the backend reports unhealthy (clusters serving device taints).",
)
@click.option(
    "--prepare-delay",
    "prepare_delay",
    multiple=True,
    metavar="DEVICE=SECONDS",
    help="Example driver: make preparing DEVICE take SECONDS (tests, demos).",
)
@click.option("--health-port", type=int, default=None, help="gRPC health port (liveness).")
@click.option("--metrics-port", type=int, default=None, help="Prometheus metrics port.")
@click.option("--stale-claim-grace", type=float, default=300.0, show_default=True)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--log-level", default="info", show_default=True)
def command(
    driver: str,
    driver_name: str,
    node_name: str,
    plugin_dir: Path | None,
    registry_dir: Path,
    cdi_dir: Path,
    state_dir: Path | None,
    gpus: int,
    pod_uid: str,
    api_url: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
    in_cluster: bool,
    standalone: bool,
    publish: bool,
    health_port: int | None,
    metrics_port: int | None,
    stale_claim_grace: float,
    prepare_delay: tuple[str, ...],
    feature_gates: tuple[str, ...],
    unhealthy_taint_effect: str,
    log_format: str,
    log_level: str,
) -> None:
    """Run a DRA driver on this node (the DaemonSet entrypoint)."""
    logs.configure(fmt=log_format, level=log_level)
    plugin_dir = plugin_dir or KUBELET_PLUGINS_DIR / driver_name
    state_dir = state_dir or plugin_dir / "backend"
    settings = DriverSettings(
        driver_name=driver_name,
        node_name=node_name,
        plugin_dir=plugin_dir,
        registry_dir=registry_dir,
        cdi_dir=cdi_dir,
        pod_uid=pod_uid,
        health_port=health_port,
        metrics_port=metrics_port,
        stale_claim_grace=stale_claim_grace,
        backend_state_dir=state_dir,
    )
    try:
        api = access.resolve(
            url=api_url, kubeconfig=kubeconfig, context=kube_context, in_cluster=in_cluster
        )
    except access.ApiAccessError as exc:
        raise click.UsageError(str(exc)) from None
    if api is None and not standalone:
        raise click.UsageError(
            "no Kubernetes API configured: give --kubeconfig, set $KUBECONFIG, run in a pod, "
            "or create ~/.kube/config (--standalone runs without one, for socket tests only)"
        )
    if api is not None and standalone:
        raise click.UsageError(f"--standalone conflicts with the API access {api.describe()}")
    options = RunOptions(
        driver=driver,
        state_dir=state_dir,
        gpus=gpus,
        api=api,
        publish=publish,
        publisher=PublisherSettings(
            feature_gates=dict(_gate(item) for item in feature_gates),
            unhealthy_taint_effect=_TAINT_EFFECTS[unhealthy_taint_effect],
        ),
        prepare_delay=tuple(_delay(item) for item in prepare_delay),
    )
    try:
        asyncio.run(serve(settings, options))
    except KeyboardInterrupt:
        sys.exit(130)
    except access.ApiAccessError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except errors.PermanentError as exc:
        # One line naming the directory or socket, no traceback: nothing here is a bug.
        log.error("cannot start: %s", exc)  # noqa: TRY400
        unusable_dir = isinstance(exc, directories.DirectoryError)
        sys.exit(directories.EXIT_UNUSABLE_DIRECTORY if unusable_dir else 1)
