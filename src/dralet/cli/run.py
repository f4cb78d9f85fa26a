"""``dralet run``: run a driver on this node (the DaemonSet entrypoint)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from dralet import logs
from dralet.drivers import example
from dralet.metrics import DriverMetrics
from dralet.node.backend import DeviceBackend
from dralet.node.runner import BackgroundWork, Driver
from dralet.node.settings import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR, DriverSettings

__all__ = ["RunOptions", "command", "serve"]


@dataclass(frozen=True)
class RunOptions:
    """Everything ``dralet run`` needs beyond the driver settings."""

    driver: str
    state_dir: Path
    gpus: int
    api_url: str | None
    kubeconfig: Path | None
    in_cluster: bool
    publish: bool
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
    backend = _backend(options, settings)
    if options.api_url is None and options.kubeconfig is None and not options.in_cluster:
        await Driver(settings, backend, metrics=metrics).run()
        return
    # The Kubernetes client is heavy: loaded only when an API is used.
    from dralet.kube.claims import ClaimClient
    from dralet.kube.client import connect
    from dralet.kube.events import NodeEvents
    from dralet.node.publisher import SlicePublisher

    async with await connect(
        url=options.api_url,
        kubeconfig=options.kubeconfig,
        in_cluster=options.in_cluster or None,
        metrics=metrics,
    ) as client:
        background: dict[str, BackgroundWork] = {}
        if options.publish:
            publisher = SlicePublisher(
                client,
                backend,
                driver=settings.driver_name,
                node_name=settings.node_name,
                pool=settings.pool_name,
                metrics=metrics,
            )
            background["resourceslices"] = publisher.run
        driver = Driver(
            settings,
            backend,
            claims=ClaimClient(client),
            metrics=metrics,
            background=background,
            events=NodeEvents(client, driver=settings.driver_name, node_name=settings.node_name),
        )
        await driver.run()


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
@click.option("--kubeconfig", type=click.Path(path_type=Path), default=None)
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@click.option(
    "--publish/--no-publish",
    default=True,
    show_default=True,
    help="Publish ResourceSlices for this node's devices.",
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
    in_cluster: bool,
    publish: bool,
    health_port: int | None,
    metrics_port: int | None,
    stale_claim_grace: float,
    prepare_delay: tuple[str, ...],
    log_format: str,
    log_level: str,
) -> None:
    """Run a DRA driver on this node (the DaemonSet entrypoint)."""
    logs.configure(fmt=log_format, level=log_level)
    settings = DriverSettings(
        driver_name=driver_name,
        node_name=node_name,
        plugin_dir=plugin_dir or KUBELET_PLUGINS_DIR / driver_name,
        registry_dir=registry_dir,
        cdi_dir=cdi_dir,
        pod_uid=pod_uid,
        health_port=health_port,
        metrics_port=metrics_port,
        stale_claim_grace=stale_claim_grace,
    )
    options = RunOptions(
        driver=driver,
        state_dir=state_dir or settings.plugin_dir / "backend",
        gpus=gpus,
        api_url=api_url,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        publish=publish,
        prepare_delay=tuple(_delay(item) for item in prepare_delay),
    )
    try:
        asyncio.run(serve(settings, options))
    except KeyboardInterrupt:
        sys.exit(130)
