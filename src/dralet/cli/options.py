"""The flags every command spells the same way: API access (kubectl's names and order),
the node, and the output format. A command that takes one of these takes it from here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from dralet.cli import exits
from dralet.node.settings import DriverSettings

__all__ = ["NODE_NAME_ENV", "api_access", "boot_id_file", "driver", "feature_gates", "output"]

F = TypeVar("F", bound=Callable[..., Any])

NODE_NAME_ENV = "NODE_NAME"
"""Set from the downward API in the DaemonSet (``spec.nodeName``)."""
KUBECONFIG_HELP = (
    "Kubeconfig file [default: $KUBECONFIG, then the pod's service account, then ~/.kube/config]."
)


def api_access(*, in_cluster: bool = True, api_url: bool = True) -> Callable[[F], F]:
    """``--kubeconfig`` and ``--context`` (parameters ``kubeconfig``, ``kube_context``),
    plus ``--in-cluster`` and ``--api-url`` where the command can use them; resolved by
    ``dralet.kube.access.resolve`` in kubectl's order."""

    def decorate(function: F) -> F:
        decorators = [
            click.option(
                "--kubeconfig",
                type=click.Path(path_type=Path, dir_okay=False),
                default=None,
                help=KUBECONFIG_HELP,
            ),
            click.option(
                "--context", "kube_context", default=None, help="Kubeconfig context to use."
            ),
        ]
        if in_cluster:
            decorators.append(
                click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
            )
        if api_url:
            decorators.append(
                click.option(
                    "--api-url", default=None, help="API server URL without auth (API stand-ins)."
                )
            )
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return decorate


def driver(*, default: str | None) -> Callable[[F], F]:
    """``--driver`` (``$DRALET_DRIVER``), ``--driver-config`` (``$DRALET_DRIVER_CONFIG``)
    and ``--driver-option KEY=VALUE``: the backend, found and built as ``dralet run``
    builds it (``dralet.node.factory``); parameters ``driver``, ``driver_config``,
    ``driver_options``."""
    decorators = [
        click.option(
            "--driver",
            "driver",
            envvar="DRALET_DRIVER",
            default=default,
            show_default=default is not None,
            help="The driver's backend: an installed driver (entry point of the dralet.drivers "
            "group: example, example-strict, hostdev, ...) or package.module:factory "
            "($DRALET_DRIVER).",
        ),
        click.option(
            "--driver-config",
            "--config",
            "driver_config",
            type=click.Path(path_type=Path, dir_okay=False),
            envvar="DRALET_DRIVER_CONFIG",
            default=None,
            help="The driver's own configuration file, handed to its factory; --config for "
            "short ($DRALET_DRIVER_CONFIG).",
        ),
        click.option(
            "--driver-option",
            "driver_options",
            multiple=True,
            metavar="KEY=VALUE",
            help="An option for the driver's factory (repeatable).",
        ),
    ]

    def decorate(function: F) -> F:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return decorate


def driver_option(item: str) -> tuple[str, str]:
    """One ``--driver-option KEY=VALUE``."""
    key, sep, value = item.partition("=")
    if not key or not sep:
        raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
    return key, value


def boot_id_file() -> Callable[[F], F]:
    """``--boot-id-file`` (parameter ``boot_id_file``): where the node's boot ID is read. A
    record stamped under another boot ID was prepared before a reboot; ``dralet audit``
    must read the file ``dralet run`` reads, or it judges every prepared claim rebooted."""
    return click.option(
        "--boot-id-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=DriverSettings.boot_id_path,
        show_default=True,
        help="The node's boot ID; a changed one tells recovery the node rebooted.",
    )


def output(*, default: str = "table", help: str | None = None) -> Callable[[F], F]:
    """``-o/--output table|json|yaml`` (parameter ``output``)."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(exits.OUTPUT_FORMATS),
        default=default,
        show_default=True,
        help=help,
    )


def _gates(_ctx: click.Context, _param: click.Parameter, items: tuple[str, ...]) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in items:
        gate, _, value = item.partition("=")
        if value.lower() not in ("true", "false") or not gate:
            raise click.BadParameter(f"expected GATE=true|false, got {item!r}")
        gates[gate] = value.lower() == "true"
    return gates


def feature_gates(help: str) -> Callable[[F], F]:
    """``--feature-gate GATE=true|false``, repeatable (parameter ``feature_gates``, a dict
    of upstream gate names)."""
    return click.option(
        "--feature-gate",
        "feature_gates",
        multiple=True,
        metavar="GATE=true|false",
        callback=_gates,
        help=help,
    )
