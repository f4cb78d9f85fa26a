"""``dralet validate FILE|DIR|-``: check DRA manifests against the bundled Kubernetes
schemas, the API server's semantic rules, CEL, and dralet's lint rules."""

from __future__ import annotations

import sys

import click

from dralet.validation import catalog, engine, report
from dralet.validation.diagnostics import Severity
from dralet.validation.targets import (
    DEFAULT_KUBERNETES_VERSION,
    SUPPORTED_KUBERNETES_VERSIONS,
    Target,
)

__all__ = ["command"]

_FAILED = 1


@click.command(name="validate")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, allow_dash=True))
@click.option(
    "--kubernetes-version",
    "-k",
    type=click.Choice(SUPPORTED_KUBERNETES_VERSIONS),
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    help="Kubernetes release whose API to validate against.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Diagnostics as lines with a summary, or as a JSON list.",
)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--explain", "explain_id", metavar="ID", help="Explain a rule and exit.")
def command(
    paths: tuple[str, ...],
    kubernetes_version: str,
    output: str,
    strict: bool,
    explain_id: str | None,
) -> None:
    """Check DRA manifests: DeviceClass, ResourceClaim(Template), ResourceSlice, and pods
    or workloads that use claims. PATHS are files, directories (walked for *.yaml, *.yml
    and *.json) or - for stdin. Exits 1 on errors (or on warnings with --strict)."""
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
    result = engine.validate_paths(paths, target=Target(kubernetes_version), stdin=sys.stdin)
    if output == "json":
        click.echo(report.json_report(result.diagnostics))
    else:
        for diagnostic in result.diagnostics:
            click.echo(report.text_line(diagnostic))
        click.echo(report.summary(result.diagnostics, files=result.files, objects=result.objects))
    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    if any(d.severity in failing for d in result.diagnostics):
        sys.exit(_FAILED)
