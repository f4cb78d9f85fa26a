"""``dralet run``: run a driver on this node (the DaemonSet entrypoint).

Flag parsing only: the flags become one ``dralet.Settings`` (defaults read from the
settings dataclasses) and the driver runs through ``dralet.run``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

import click

from dralet import errors, logs
from dralet.cli import exits, options
from dralet.drivers import example
from dralet.kube import access
from dralet.node import directories, factory
from dralet.node.config import ApiSettings, Settings
from dralet.node.devices import TaintEffect
from dralet.node.driver import run
from dralet.node.publisher import PublisherSettings
from dralet.node.settings import KUBELET_PLUGINS_DIR, DriverSettings

__all__ = ["command"]

log = logging.getLogger("dralet.run")

_TAINT_EFFECTS: dict[str, TaintEffect | None] = {
    "NoSchedule": "NoSchedule",
    "NoExecute": "NoExecute",
    "None": "None",
    "off": None,
}


def _default(settings: type[Any], name: str) -> Any:
    """The default of dataclass field ``name``: defined there, never re-typed here."""
    for item in dataclasses.fields(settings):
        if item.name == name:
            if item.default is not dataclasses.MISSING:
                return item.default
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
    raise KeyError(name)


def _effect_name(effect: TaintEffect | None) -> str:
    return next(name for name, value in _TAINT_EFFECTS.items() if value == effect)


def _driver_options(
    driver_options: tuple[str, ...], gpus: int | None, prepare_delay: tuple[str, ...]
) -> dict[str, str]:
    pairs = dict(options.driver_option(item) for item in driver_options)
    if gpus is not None:
        pairs["gpus"] = str(gpus)
    for item in prepare_delay:
        seconds = item.partition("=")[2]
        try:
            float(seconds)
        except ValueError:
            raise click.BadParameter(f"expected DEVICE=SECONDS, got {item!r}") from None
        previous = pairs.get("prepare-delay")
        pairs["prepare-delay"] = f"{previous},{item}" if previous else item
    return pairs


@click.command(
    "run",
    epilog=exits.epilog(
        "the driver stopped on an error it cannot recover from",
        [(directories.EXIT_UNUSABLE_DIRECTORY, "a plugin, registry, CDI or state dir is unusable")],
        bad_input="an unknown driver, no API access without --standalone",
    ),
)
@options.driver(default="example")
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
    default=_default(DriverSettings, "registry_dir"),
    show_default=True,
)
@click.option(
    "--cdi-dir",
    type=click.Path(path_type=Path),
    default=_default(DriverSettings, "cdi_dir"),
    show_default=True,
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Backend state dir [default: <plugin-dir>/backend].",
)
@options.boot_id_file()
@click.option(
    "--gpus",
    type=int,
    default=None,
    help="Example driver: simulated GPUs (--driver-option gpus=N).",
)
@click.option(
    "--prepare-delay",
    "prepare_delay",
    multiple=True,
    metavar="DEVICE=SECONDS",
    help="Example driver: make preparing DEVICE take SECONDS (tests, demos).",
)
@click.option(
    "--pod-uid",
    default=_default(DriverSettings, "pod_uid"),
    help="Per-instance socket names for rolling updates (Kubernetes >= 1.33).",
)
@options.api_access()
@click.option(
    "--standalone",
    is_flag=True,
    help="Run with no Kubernetes API (claims cannot be read; for socket-level tests only).",
)
@click.option(
    "--publish/--no-publish",
    default=_default(Settings, "publish"),
    show_default=True,
    help="Publish ResourceSlices for this node's devices.",
)
@options.feature_gates(
    help="A DRA feature gate the cluster sets differently from its release's default "
    "(e.g. DRADeviceTaints=true on 1.35); decides which optional device fields are published.",
)
@click.option(
    "--unhealthy-taint-effect",
    type=click.Choice(list(_TAINT_EFFECTS)),
    default=_effect_name(_default(PublisherSettings, "unhealthy_taint_effect")),
    show_default=True,
    help="Taint put on devices the backend reports unhealthy (clusters serving device taints).",
)
@click.option(
    "--health-port",
    type=int,
    default=_default(DriverSettings, "health_port"),
    help="gRPC health port (liveness, readiness).",
)
@click.option(
    "--metrics-port",
    type=int,
    default=_default(DriverSettings, "metrics_port"),
    help="Prometheus metrics port.",
)
@click.option(
    "--stale-claim-grace",
    type=float,
    default=_default(DriverSettings, "stale_claim_grace"),
    show_default=True,
    help="Seconds a claim must look stale before it is unprepared.",
)
@click.option(
    "--write-device-status/--no-write-device-status",
    default=_default(DriverSettings, "write_device_status"),
    show_default=True,
    help="Write each prepared device's entry of the claim's status.devices (a Ready "
    "condition, or the backend's conditions, data and network data); needs the chart's "
    "deviceStatus RBAC.",
)
@click.option(
    "--device-metadata/--no-device-metadata",
    default=_default(DriverSettings, "device_metadata"),
    show_default=True,
    help="Write a device metadata file per request of each prepared claim and mount it "
    "read-only into the request's containers under /var/run/kubernetes.io/"
    "dra-device-attributes (KEP-5304).",
)
@click.option(
    "--device-metadata-versions",
    default=",".join(_default(DriverSettings, "device_metadata_versions")),
    show_default=True,
    metavar="V1,V2,...",
    help="The metadata.resource.k8s.io versions each device metadata file holds, newest "
    "first (readers take the first they know).",
)
@click.option(
    "--max-parallel-claims",
    type=click.IntRange(min=1),
    default=_default(DriverSettings, "max_parallel_claims"),
    show_default=True,
    help="Claims prepared or unprepared at the same time.",
)
@click.option(
    "--remove-plugin-dir-when-unused/--keep-plugin-dir",
    default=_default(DriverSettings, "remove_plugin_dir_when_unused"),
    show_default=True,
    help="At a clean stop, remove the plugin dir when no claim record is left in it and "
    "no other instance runs in it (an uninstall leaves no directory).",
)
@click.option(
    "--shutdown-grace",
    type=float,
    default=_default(DriverSettings, "shutdown_grace"),
    show_default=True,
    help="Seconds in-flight calls get after SIGTERM before they are cancelled.",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--log-level", default="info", show_default=True)
def command(
    driver: str,
    driver_config: Path | None,
    driver_options: tuple[str, ...],
    driver_name: str,
    node_name: str,
    plugin_dir: Path | None,
    registry_dir: Path,
    cdi_dir: Path,
    state_dir: Path | None,
    boot_id_file: Path,
    gpus: int | None,
    prepare_delay: tuple[str, ...],
    pod_uid: str,
    api_url: str | None,
    kubeconfig: Path | None,
    kube_context: str | None,
    in_cluster: bool,
    standalone: bool,
    publish: bool,
    feature_gates: dict[str, bool],
    unhealthy_taint_effect: str,
    health_port: int | None,
    metrics_port: int | None,
    stale_claim_grace: float,
    write_device_status: bool,
    device_metadata: bool,
    device_metadata_versions: str,
    max_parallel_claims: int,
    remove_plugin_dir_when_unused: bool,
    shutdown_grace: float,
    log_format: str,
    log_level: str,
) -> None:
    """Run a DRA driver on this node (the DaemonSet entrypoint)."""
    logs.configure(fmt=log_format, level=log_level)
    paths: dict[str, Any] = {"plugin_dir": plugin_dir, "backend_state_dir": state_dir}
    try:
        driver_settings = DriverSettings(
            driver_name=driver_name,
            node_name=node_name,
            registry_dir=registry_dir,
            cdi_dir=cdi_dir,
            boot_id_path=boot_id_file,
            pod_uid=pod_uid,
            health_port=health_port,
            metrics_port=metrics_port,
            stale_claim_grace=stale_claim_grace,
            write_device_status=write_device_status,
            device_metadata=device_metadata,
            device_metadata_versions=tuple(
                v.strip() for v in device_metadata_versions.split(",") if v.strip()
            ),
            max_parallel_claims=max_parallel_claims,
            remove_plugin_dir_when_unused=remove_plugin_dir_when_unused,
            shutdown_grace=shutdown_grace,
            **{name: value for name, value in paths.items() if value is not None},
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    settings = Settings(
        driver=driver_settings,
        api=ApiSettings(
            url=api_url,
            kubeconfig=kubeconfig,
            context=kube_context,
            in_cluster=in_cluster,
            standalone=standalone,
        ),
        publish=publish,
        publishing=PublisherSettings(
            feature_gates=feature_gates,
            unhealthy_taint_effect=_TAINT_EFFECTS[unhealthy_taint_effect],
        ),
    )
    pairs = _driver_options(driver_options, gpus, prepare_delay)
    try:
        config = factory.DriverConfig.read(driver_config, pairs)
        run(driver, settings, config=config)
    except KeyboardInterrupt:
        sys.exit(130)
    except (access.ApiAccessError, factory.DriverLoadError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except errors.PermanentError as exc:
        # One line naming the directory, socket or driver, no traceback: nothing here is a bug.
        log.error("cannot start: %s", exc)  # noqa: TRY400
        unusable_dir = isinstance(exc, directories.DirectoryError)
        sys.exit(directories.EXIT_UNUSABLE_DIRECTORY if unusable_dir else 1)
