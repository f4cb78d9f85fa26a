"""``dralet audit``: report (and with ``--fix`` repair) every inconsistency on a node.

Reads what the driver keeps on the node (records, CDI directory), the devices its
backend holds (``devices_in_use()`` of the backend ``--driver`` builds, exactly as
``dralet run --driver`` builds it) and, when the API is found (kubectl's order), the
ResourceClaims. Finding inconsistencies is the pure
``dralet.node.audit.find_inconsistencies``; ``--fix`` runs ``dralet.node.audit.repair``,
which executes the planned steps through the claim engine, never a separate path.

Exit status: 0 consistent (after ``--fix``: everything repaired), 1 inconsistencies
remain, 2 usage or I/O error, a missing plugin dir, a driver that cannot be built.

Over 400 lines because the command's three outputs (table, prose, JSON) and its sources
(files, backend, API) are one user-facing contract kept in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from dralet import errors, logs
from dralet.cdi import names as cdi_names
from dralet.checkpoint import storefiles
from dralet.cli import exits, options
from dralet.drivers import example
from dralet.kube import access
from dralet.node import audit, factory
from dralet.node.backend import ClaimBackend
from dralet.node.claims import ClaimEngine, RecoveryReport
from dralet.node.config import Settings
from dralet.node.settings import KUBELET_PLUGINS_DIR, DriverSettings

__all__ = ["ApiClaims", "AuditResult", "command", "render_table", "wrap_prose"]

EXIT_CONSISTENT = exits.OK
EXIT_INCONSISTENT = exits.FINDINGS
EXIT_ERROR = exits.BAD_INPUT
DEFAULT_WIDTH = 100
"""Table width when the output is not a terminal."""
COLUMN_GAP = 2
MIN_COLUMN_WIDTH = 8
BACKEND_NOT_INSPECTED = (
    "not inspected: pass --driver NAME (the driver dralet run runs, $DRALET_DRIVER) "
    "to read the devices its backend holds"
)
API_NOT_CONSULTED = (
    "not consulted: no API access (--kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config)"
)


class AuditError(Exception):
    """An I/O or API failure that keeps the audit from finishing (exit status 2)."""


@dataclass(frozen=True)
class BackendChoice:
    """The driver's backend, built by its factory as ``dralet run`` builds it."""

    name: str
    """What ``--driver`` named: an entry point or ``package.module:factory``."""
    state_dir: Path
    backend: ClaimBackend


def build_backend(
    name: str, settings: DriverSettings, config: factory.DriverConfig
) -> BackendChoice:
    """The backend of driver ``name`` for the node ``settings`` describe (its state dir
    is ``settings.backend_state_dir``, default ``<plugin dir>/backend``, as for run)."""
    target, make = factory.find(name)
    node = Settings(driver=settings, publish=False)
    backend = factory.build(name, make, node, config)
    return BackendChoice(
        name=name if name == target else f"{name} ({target})",
        state_dir=node.state_dir,
        backend=backend,
    )


@dataclass(frozen=True)
class ApiClaims:
    """``ClaimLister`` over ``dralet.kube``'s listing (every namespace)."""

    client: Any
    """A ``dralet.kube.KubeClient``."""

    async def list_claims(self) -> Sequence[Mapping[str, Any]]:
        from dralet import kube  # imported here: the API client takes a second to load

        return await kube.list_resource_claims(self.client)


@dataclass(frozen=True)
class AuditResult:
    """One audit run: what was read, what was found, what ``--fix`` did."""

    settings: DriverSettings
    snapshot: audit.NodeSnapshot
    findings: tuple[audit.Finding, ...]
    backend: BackendChoice | None
    api_server: str
    fix_applied: bool = False
    actions: tuple[tuple[str, str], ...] = ()
    fail_closed: str = ""
    remaining: tuple[audit.Finding, ...] = ()

    @property
    def consistent(self) -> bool:
        return not (self.remaining if self.fix_applied else self.findings)

    def to_json(self) -> dict[str, Any]:
        snapshot = self.snapshot
        checkpoint = snapshot.checkpoint
        return {
            "driver": self.settings.driver_name,
            "node": self.settings.node_name,
            "pool": self.settings.pool_name,
            "sources": {
                "checkpoint": {
                    "path": str(records_path(self.settings)),
                    "claims": len(checkpoint.claims) if checkpoint is not None else None,
                    "error": snapshot.checkpoint_error,
                },
                "cdi": {
                    "dir": str(self.settings.cdi_dir),
                    "kind": self.settings.cdi_kind,
                    "specs": len(snapshot.specs),
                },
                "backend": {
                    "inspected": snapshot.in_use is not None,
                    "driver": self.backend.name if self.backend else None,
                    "stateDir": str(self.backend.state_dir) if self.backend else None,
                    "devicesInUse": len(snapshot.in_use) if snapshot.in_use is not None else None,
                    "note": "" if snapshot.in_use is not None else BACKEND_NOT_INSPECTED,
                },
                "api": {
                    "consulted": snapshot.claims is not None,
                    "server": self.api_server or None,
                    "claims": len(snapshot.claims) if snapshot.claims is not None else None,
                },
            },
            "findings": [asdict(f) for f in self.findings],
            "fix": {
                "applied": self.fix_applied,
                "actions": [{"action": a, "subject": s} for a, s in self.actions],
                "failClosed": self.fail_closed,
                "remaining": [asdict(f) for f in self.remaining],
            },
            "consistent": self.consistent,
        }


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int | None = None
) -> str:
    """A plain-text table no wider than ``width`` (default: the terminal); long cells wrap."""
    total_width = width or shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    widths = [max([len(h), *(len(str(row[i])) for row in rows)]) for i, h in enumerate(headers)]
    budget = total_width - COLUMN_GAP * (len(headers) - 1)
    # First wrap prose at word boundaries, keeping each column's longest word (a UID, a
    # finding kind) whole; only when that is not enough, break words too.
    floors = [
        min(
            widths[i],
            max(
                len(word)
                for cell in [h, *(str(r[i]) for r in rows)]
                for word in cell.split() or [""]
            ),
        )
        for i, h in enumerate(headers)
    ]
    for i in sorted(range(len(widths)), key=lambda i: widths[i], reverse=True):
        widths[i] = max(floors[i], widths[i] - max(0, sum(widths) - budget))
    # Still too wide: break words in the column with the most text (the prose) first.
    by_text = sorted(range(len(widths)), key=lambda i: -sum(len(str(r[i])) for r in rows))
    for i in by_text:
        floor = min(widths[i], MIN_COLUMN_WIDTH)
        widths[i] = max(floor, widths[i] - max(0, sum(widths) - budget))
    lines: list[str] = []
    for row in [list(headers), *([str(c) for c in r] for r in rows)]:
        cells = [
            textwrap.wrap(cell, w, break_long_words=True, break_on_hyphens=False) or [""]
            for cell, w in zip(row, widths, strict=True)
        ]
        for n in range(max(len(c) for c in cells)):
            parts = [
                (c[n] if n < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)
            ]
            lines.append((" " * COLUMN_GAP).join(parts).rstrip())
    return "\n".join(lines)


@contextlib.asynccontextmanager
async def _api_client(api: access.ApiAccess | None) -> AsyncIterator[Any]:
    if api is None:
        yield None
        return
    from dralet import kube  # imported here: the API client takes a second to load

    try:
        client = await kube.connect(api_access=api)
    except Exception as exc:  # the config loaders raise many kinds of error
        raise AuditError(f"cannot connect to the API server: {exc}") from exc
    try:
        yield client
    finally:
        await client.close()


async def _snapshot(
    settings: DriverSettings,
    *,
    backend: ClaimBackend | None,
    lister: ApiClaims | None,
) -> tuple[audit.NodeSnapshot, tuple[audit.Finding, ...]]:
    snapshot = await audit.take_snapshot(settings, backend=backend, claims=lister)
    return snapshot, tuple(audit.find_inconsistencies(snapshot))


async def run_audit(
    settings: DriverSettings,
    *,
    backend: BackendChoice | None,
    api: access.ApiAccess | None,
    fix: bool,
    accept_lost_store: bool = False,
) -> AuditResult:
    """Audit the node; with ``fix``, repair through the claim engine (releasing devices
    through ``backend``, the driver's own) and audit again. ``accept_lost_store``: the
    operator says a lost or unusable record store is lost for good (``--fix`` then
    starts a new one and removes what the node still holds of the lost claims)."""
    devices = backend.backend if backend is not None else None
    async with _api_client(api) as client:
        lister = ApiClaims(client) if client is not None else None
        try:
            snapshot, findings = await _snapshot(settings, backend=devices, lister=lister)
        except (OSError, TimeoutError, errors.DraletError) as exc:
            raise AuditError(str(exc)) from exc
        result = AuditResult(
            settings=settings,
            snapshot=snapshot,
            findings=findings,
            backend=backend,
            api_server=str(client.host) if client is not None else "",
        )
        if not fix or not (findings or accept_lost_store):
            return result
        if devices is None:
            raise AuditError("--fix releases devices through the driver's backend: pass --driver")
        claim_source = None
        if client is not None:
            from dralet import kube  # imported here: the API client takes a second to load

            claim_source = kube.ClaimClient(client)
        engine = ClaimEngine(settings, backend=devices, claims=claim_source)
        try:
            report: RecoveryReport
            if accept_lost_store:
                # A new store first; then what the lost claims left is found (and
                # repaired) as any other inconsistency.
                report = await audit.accept_lost_store(engine)
                _, left = await _snapshot(settings, backend=devices, lister=lister)
                if left:
                    more = await audit.repair(engine, left)
                    report.actions.extend(more.actions)
                    report.fail_closed = more.fail_closed
            else:
                report = await audit.repair(engine, findings)
            _, remaining = await _snapshot(settings, backend=devices, lister=lister)
        except (OSError, TimeoutError, errors.DraletError) as exc:
            raise AuditError(f"repair failed: {exc}") from exc
        return AuditResult(
            settings=result.settings,
            snapshot=result.snapshot,
            findings=result.findings,
            backend=backend,
            api_server=result.api_server,
            fix_applied=True,
            actions=tuple(report.actions),
            fail_closed=report.fail_closed,
            remaining=remaining,
        )


def _finding_rows(findings: Sequence[audit.Finding]) -> list[list[str]]:
    return [[f.kind, f.subject, f.message, f.repair or "needs a person"] for f in findings]


def wrap_prose(lines: Sequence[str], width: int | None) -> str:
    """Join report lines; prose lines (not table rows) wrap at the terminal width."""
    total_width = width or shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    out: list[str] = []
    for block in lines:
        for line in block.split("\n") if "\n" in block else [block]:
            if len(line) <= total_width:
                out.append(line)
            else:
                out.extend(textwrap.wrap(line, total_width, break_on_hyphens=False))
    return "\n".join(out)


def _had_records(settings: DriverSettings) -> bool:
    """Whether a driver kept claim records here (a lost store's marker counts: the
    audit then reports the loss)."""
    marker = storefiles.marker_path(settings.store_path)
    return os.path.lexists(records_path(settings)) or os.path.lexists(marker)


def records_path(settings: DriverSettings) -> Path:
    """The file the claim records were read from: the record database, or the
    ``checkpoint.json`` of an older release it has not taken over yet."""
    if not os.path.lexists(settings.store_path) and os.path.lexists(settings.checkpoint_path):
        return settings.checkpoint_path
    return settings.store_path


def render_text(result: AuditResult, *, width: int | None = None) -> str:
    """The human report: what was read, a findings table, and what --fix does or did."""
    s = result.settings
    snap = result.snapshot
    checkpoint = (
        f"{records_path(s)} ({len(snap.checkpoint.claims)} claims)"
        if snap.checkpoint is not None
        else f"{records_path(s)} (unusable)"
    )
    backend = (
        f"driver {result.backend.name}, state dir {result.backend.state_dir} "
        f"({len(snap.in_use)} devices in use)"
        if snap.in_use is not None and result.backend is not None
        else BACKEND_NOT_INSPECTED
    )
    api = (
        f"{result.api_server} ({len(snap.claims)} ResourceClaims)"
        if snap.claims is not None
        else API_NOT_CONSULTED
    )
    out = [
        f"dralet audit: driver {s.driver_name} on node {s.node_name} (pool {s.pool_name})",
        render_table(
            ["SOURCE", "READ"],
            [
                ["checkpoint", checkpoint],
                ["CDI dir", f"{s.cdi_dir} ({len(snap.specs)} specs of kind {s.cdi_kind})"],
                ["backend", backend],
                ["API", api],
            ],
            width=width,
        ),
        "",
    ]
    if not result.findings:
        out.append("No inconsistencies found.")
        return wrap_prose(out, width)
    headers = [
        "KIND",
        "SUBJECT",
        "PROBLEM",
        "REPAIRED" if result.fix_applied else "REPAIR",
    ]
    out.append(f"{len(result.findings)} inconsistencies found:")
    out.append(render_table(headers, _finding_rows(result.findings), width=width))
    out.append("")
    if not result.fix_applied:
        repairable = sum(1 for f in result.findings if f.repair)
        out.append(
            f"Dry run: --fix would repair {repairable} of {len(result.findings)} "
            "(through the driver's own recovery); nothing was changed."
        )
        return wrap_prose(out, width)
    if result.actions:
        out.append("Repaired:")
        out.append(
            render_table(["ACTION", "SUBJECT"], [list(a) for a in result.actions], width=width)
        )
    else:
        out.append("Repair ran; it changed nothing.")
    if result.fail_closed:
        out.append(f"The checkpoint stays unusable, the driver fails closed: {result.fail_closed}")
    out.append("")
    if result.remaining:
        out.append(f"{len(result.remaining)} inconsistencies remain:")
        out.append(
            render_table(
                ["KIND", "SUBJECT", "PROBLEM", "REPAIR"],
                _finding_rows(result.remaining),
                width=width,
            )
        )
    else:
        out.append("Audit after the repair: no inconsistencies.")
    return wrap_prose(out, width)


@contextlib.contextmanager
def _repair_log() -> Iterator[None]:
    """The claim engine's warnings (what a repair did and why) go to stderr while auditing."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.KeyValueFormatter())
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("dralet")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@click.command(
    "audit",
    epilog=exits.epilog(
        "inconsistencies (after --fix: some remain)",
        bad_input="a missing plugin dir or claim records, a driver that cannot be built",
    ),
)
@click.option("--driver-name", default=example.DRIVER_NAME, show_default=True)
@click.option("--node-name", envvar="NODE_NAME", required=True, help="This node ($NODE_NAME).")
@click.option("--pool", default="", help="ResourceSlice pool [default: the node name].")
@click.option(
    "--plugin-dir",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Plugin data dir [default: {KUBELET_PLUGINS_DIR}/<driver-name>].",
)
@click.option(
    "--cdi-dir", type=click.Path(path_type=Path), default=Path("/var/run/cdi"), show_default=True
)
@click.option("--cdi-class", default="claim", show_default=True, help="CDI kind <driver>/<class>.")
@options.driver(default=None)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The backend's state dir, as given to dralet run [default: <plugin-dir>/backend].",
)
@click.option(
    "--backend-state",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    hidden=True,
    help="Deprecated: --driver example --state-dir DIR.",
)
@options.boot_id_file()
@options.api_access()
@click.option(
    "--fix", is_flag=True, help="Repair through the driver's recovery (default: dry run)."
)
@click.option(
    "--accept-lost-store",
    is_flag=True,
    help="With --fix: the claim records are lost for good (the driver fails closed on an "
    "unusable or missing store); start a new store (the old one is kept aside) and remove "
    "what the node still holds of the lost claims.",
)
@options.output()
def command(
    driver_name: str,
    node_name: str,
    pool: str,
    plugin_dir: Path | None,
    cdi_dir: Path,
    cdi_class: str,
    driver: str | None,
    driver_config: Path | None,
    driver_options: tuple[str, ...],
    state_dir: Path | None,
    backend_state: Path | None,
    boot_id_file: Path,
    kubeconfig: Path | None,
    kube_context: str | None,
    in_cluster: bool,
    api_url: str | None,
    fix: bool,
    accept_lost_store: bool,
    output: str,
) -> None:
    """Report (and --fix) leaks and inconsistencies on a node."""
    if sum((api_url is not None, kubeconfig is not None, in_cluster)) > 1:
        raise click.UsageError("use only one of --api-url, --kubeconfig and --in-cluster")
    if backend_state is not None:
        if state_dir is not None or driver not in (None, "example"):
            raise click.UsageError("--backend-state is --driver example --state-dir DIR: use those")
        click.echo(
            "warning: --backend-state is deprecated: use --driver example --state-dir DIR", err=True
        )
        driver, state_dir = "example", backend_state
    if accept_lost_store and not fix:
        raise click.UsageError("--accept-lost-store is a repair: pass --fix with it")
    if fix and driver is None:
        raise click.UsageError(
            "--fix releases devices through the driver's backend: pass --driver NAME "
            "(the driver dralet run runs, $DRALET_DRIVER)"
        )
    try:
        cdi_names.validate_kind(f"{driver_name}/{cdi_class}")
    except cdi_names.CDINameError as exc:
        raise click.UsageError(f"--driver-name/--cdi-class: {exc}") from exc
    try:
        settings = DriverSettings(
            driver_name=driver_name,
            node_name=node_name,
            pool_name=pool,
            plugin_dir=plugin_dir or KUBELET_PLUGINS_DIR / driver_name,
            cdi_dir=cdi_dir,
            cdi_class=cdi_class,
            boot_id_path=boot_id_file,
        )
        if state_dir is not None:
            settings = dataclasses.replace(settings, backend_state_dir=state_dir)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        if not settings.plugin_dir.is_dir():
            raise AuditError(
                f"plugin dir {settings.plugin_dir}: no such directory (no driver "
                f"{driver_name} has run on this node; check --plugin-dir and --driver-name)"
            )
        if not (accept_lost_store or _had_records(settings)):
            raise AuditError(
                f"{records_path(settings)}: no claim records (driver {driver_name} has not "
                "started with this plugin dir; a started driver always has them)"
            )
        backend = None
        if driver is not None:
            pairs = dict(options.driver_option(item) for item in driver_options)
            try:
                config = factory.DriverConfig.read(driver_config, pairs)
                backend = build_backend(driver, settings, config)
            except (factory.DriverLoadError, factory.DriverStartError) as exc:
                raise AuditError(str(exc)) from None
        try:
            api = access.resolve(
                url=api_url, kubeconfig=kubeconfig, context=kube_context, in_cluster=in_cluster
            )
        except access.ApiAccessError as exc:
            raise AuditError(f"cannot connect to the API server: {exc}") from None
        with _repair_log():
            result = asyncio.run(
                run_audit(
                    settings,
                    backend=backend,
                    api=api,
                    fix=fix,
                    accept_lost_store=accept_lost_store,
                )
            )
    except AuditError as exc:
        click.echo(f"dralet audit: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    if output == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(result.to_json(), sort_keys=False), nl=False)
    else:
        click.echo(render_text(result))
    sys.exit(EXIT_CONSISTENT if result.consistent else EXIT_INCONSISTENT)
