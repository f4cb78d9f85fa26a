"""``dralet validate FILE|DIR|-``: check DRA manifests against the bundled Kubernetes
schemas, the API server's semantic rules, CEL, and dralet's lint rules.

Imports only what validation needs (no gRPC, no Kubernetes client): it runs as a
pre-commit hook, where start-up time is the whole cost of a small change.
"""

from __future__ import annotations

import sys

import click

from dralet.cli import exits, options
from dralet.validation import catalog, engine, report
from dralet.validation.diagnostics import Severity
from dralet.validation.targets import (
    DEFAULT_KUBERNETES_VERSION,
    SUPPORTED_KUBERNETES_VERSIONS,
    Target,
)

__all__ = ["command"]

LIST_GATE = "DRAListTypeAttributes"
"""The one gate validate takes; every other rule follows the target release's defaults."""


@click.command(
    name="validate",
    epilog=exits.epilog("errors in the manifests (warnings too with --strict)"),
)
@click.argument("paths", nargs=-1, type=click.Path(exists=True, allow_dash=True))
@click.option(
    "--kubernetes-version",
    "-k",
    type=click.Choice(SUPPORTED_KUBERNETES_VERSIONS),
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    help="Kubernetes release whose API to validate against (default: the newest supported).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(exits.OUTPUT_FORMATS),
    default="table",
    show_default=True,
    help="Diagnostics as file:line:col lines with a summary, or as a JSON/YAML list.",
)
@options.feature_gates(
    help=f"{LIST_GATE}=true: the cluster enables list-type attributes (alpha from 1.36): "
    "ints/bools/strings/versions values and includes() in selectors are checked, not refused.",
)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--explain", "explain_id", metavar="ID", help="Explain a rule and exit.")
@click.option("--debug", is_flag=True, help="Show a traceback for an unexpected error.")
def command(
    paths: tuple[str, ...],
    kubernetes_version: str,
    output: str,
    feature_gates: dict[str, bool],
    strict: bool,
    explain_id: str | None,
    debug: bool,
) -> None:
    """Check DRA manifests: DeviceClass, ResourceClaim(Template), ResourceSlice, pods and
    workloads that use claims, and the other built-in kinds' schemas. PATHS are files,
    directories (walked for *.yaml, *.yml and *.json) or - for stdin."""
    if explain_id is not None:
        try:
            rule = catalog.rule(explain_id)
        except KeyError:
            known = ", ".join(catalog.RULES)
            raise click.BadParameter(f"unknown rule {explain_id!r}; known: {known}") from None
        click.echo(report.explain(rule), nl=False)
        return
    if not paths:
        raise click.UsageError("give at least one FILE, DIR or - (stdin)")
    other = sorted(set(feature_gates) - {LIST_GATE})
    if other:
        raise exits.BadInput(
            f"--feature-gate {other[0]}: validate takes only {LIST_GATE}; other gates follow "
            f"Kubernetes {kubernetes_version}'s defaults"
        )
    target = Target(kubernetes_version, list_type_attributes=feature_gates.get(LIST_GATE, False))
    try:
        result = engine.validate_paths(paths, target=target, stdin=sys.stdin)
    except (OSError, UnicodeDecodeError) as error:
        raise exits.BadInput(f"reading the manifests: {error}") from None
    if output == "json":
        click.echo(report.json_report(result.diagnostics))
    elif output == "yaml":
        click.echo(report.yaml_report(result.diagnostics), nl=False)
    else:
        for diagnostic in result.diagnostics:
            click.echo(report.text_line(diagnostic))
        click.echo(report.summary(result.diagnostics, files=result.files, objects=result.objects))
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    if any(d.severity in failing for d in result.diagnostics):
        sys.exit(exits.FINDINGS)
