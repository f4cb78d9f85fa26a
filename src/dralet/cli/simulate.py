"""``dralet simulate``: the scheduler's structured allocation as a dry run.

Reads ResourceSlices, DeviceClasses, ResourceClaims (or templates), Pods and workloads
that use them, and optionally Nodes from files, directories or a live cluster; allocates
each pod's claims together on the first node where they all fit (then each claim no pod
uses), and prints the result in the shape of ``status.allocation``; ``--explain`` adds,
per request, the devices that were not chosen and why. Exit codes: 0 every pod and
claim allocated, 1 some could not be, 2 bad input.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import yaml

from dralet import releases, yamltext
from dralet.allocation import allocator, eviction, manifests, model, simulation
from dralet.allocation.features import Features, GateError
from dralet.cli import exits, options
from dralet.kube import access

__all__ = ["command"]

EXIT_ALLOCATED = exits.OK
EXIT_NOT_ALLOCATED = exits.FINDINGS
EXIT_BAD_INPUT = exits.BAD_INPUT
TABLE_WIDTH = 96
"""Widest line of the table output (fits a 100-column terminal)."""
INDENT = "  "
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
FIRST_VERSION_ALL_NEEDS_A_DEVICE = (1, 33)
FIRST_VERSION_QUALIFIED_CAPACITY_NAMES = (1, 38)
"""A capacity request may name the capacity with the driver's domain (#142202)."""
FIRST_VERSION_EMPTY_EFFECT_TOLERATES_NO_EXECUTE = (1, 38)
"""A toleration with an empty effect protects against NoExecute eviction (#143376)."""
FIRST_VERSION_SKIPS_UNUSABLE_POOLS = (1, 35)
"""ExactCount skips incomplete and invalid pools; an invalid pool fails only its node
(k8s.io/dynamic-resource-allocation@v0.35.0 structured/internal/*/allocator_*.go)."""
FINISHED_PHASES = ("Succeeded", "Failed")
"""Pod phases whose claims the scheduler no longer places."""
FIRST_VERSION_ALL_MODE_FAILS_ONLY_THE_NODE = (1, 38)
"""All over an incomplete or invalid pool fails the node, not the pod
(k8s.io/dynamic-resource-allocation@v0.38.0-beta.0 structured/internal/*/allocator_*.go)."""
SUPPORTED_KUBERNETES_VERSIONS = releases.KUBERNETES_RELEASES
"""Every release dralet knows: the scheduler's behaviour per release is in
``dralet.allocation.features`` and the settings below."""
DEFAULT_KUBERNETES_VERSION = releases.newest(SUPPORTED_KUBERNETES_VERSIONS)


BadInput = exits.BadInput


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
                yield child
    else:
        yield path


def _documents(paths: Iterable[str]) -> list[Any]:
    documents: list[Any] = []
    for given in paths:
        for path in _files(Path(given)):
            try:
                text = path.read_text(encoding="utf-8")
                if path.suffix == ".json":
                    documents.append(json.loads(text))
                else:
                    documents.extend(yamltext.load_all(text))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as error:
                raise BadInput(f"{path}: {error}") from None
    return documents


def _pending(pod: Any) -> dict[str, Any] | None:
    """A live pod the scheduler has still to place, its claims from templates named by the
    claims made for it (``status.resourceClaimStatuses``); None for any other pod."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if spec.get("nodeName") or phase in FINISHED_PHASES or not spec.get("resourceClaims"):
        return None
    made = {
        entry.get("name"): entry.get("resourceClaimName")
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    refs = []
    for ref in spec["resourceClaims"]:
        name = made.get(ref.get("name"))
        refs.append({"name": ref.get("name"), "resourceClaimName": name} if name else ref)
    return {**pod, "spec": {**spec, "resourceClaims": refs}}


def _read_cluster(kubeconfig: Path | None, context: str | None) -> list[Any]:
    """What the scheduler reads of a live cluster: slices, classes, claims, DeviceTaintRules,
    Nodes and the pods still to be placed, found like kubectl finds it: ``--kubeconfig``,
    ``$KUBECONFIG``, in-cluster, ``~/.kube/config``."""
    import asyncio

    from dralet import kube  # imported here: the API client takes a second to load

    try:
        api = access.resolve(kubeconfig=kubeconfig, context=context)
    except access.ApiAccessError as error:
        raise BadInput(str(error)) from None
    if api is None:
        raise BadInput(
            "--context: no kubeconfig (give --kubeconfig, set $KUBECONFIG or create ~/.kube/config)"
        )

    async def read() -> list[Any]:
        async with await kube.connect(api_access=api) as client:
            inventory = await kube.read_inventory(client, scheduling=True)
        pods = [p for p in (_pending(pod) for pod in inventory.pods) if p is not None]
        return [
            *inventory.slices,
            *inventory.device_classes,
            *inventory.claims,
            *inventory.taint_rules,
            *inventory.nodes,
            *pods,
        ]

    try:
        return asyncio.run(read())
    except (kube.ApiError, access.ApiAccessError, OSError) as error:
        raise BadInput(f"reading the cluster: {error}") from None


def _settings(
    kubernetes_version: str, *, admin_access: bool, gates: dict[str, bool]
) -> simulation.SimulationSettings:
    major, minor = (int(part) for part in kubernetes_version.split("."))
    try:
        features = Features.for_release(kubernetes_version).with_gates(gates)
    except GateError as error:
        raise BadInput(f"--feature-gate: {error}") from None
    return simulation.SimulationSettings(
        evictions=eviction.EvictionSettings(
            empty_effect_tolerates_no_execute=(major, minor)
            >= FIRST_VERSION_EMPTY_EFFECT_TOLERATES_NO_EXECUTE
        ),
        allocator=allocator.AllocatorSettings(
            admin_access_enabled=admin_access,
            all_mode_needs_a_device=(major, minor) >= FIRST_VERSION_ALL_NEEDS_A_DEVICE,
            features=features,
            qualified_capacity_names=(major, minor) >= FIRST_VERSION_QUALIFIED_CAPACITY_NAMES,
            skip_unusable_pools=(major, minor) >= FIRST_VERSION_SKIPS_UNUSABLE_POOLS,
            all_mode_unusable_pool_fails_node=(major, minor)
            >= FIRST_VERSION_ALL_MODE_FAILS_ONLY_THE_NODE,
        ),
    )


# --- output ------------------------------------------------------------------------


def _explanation(node: allocator.NodeAllocation) -> dict[str, Any]:
    return {
        "node": node.node or None,
        "fits": node.fits,
        "notes": list(node.notes),
        "rejected": [
            {"request": r.request, "device": str(r.device), "reason": r.reason}
            for r in node.rejections
        ],
    }


def _outcome(outcome: simulation.ClaimOutcome, *, explain: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": outcome.claim.namespace,
        "name": outcome.claim.name,
        "status": outcome.status,
        "node": outcome.node or None,
    }
    if outcome.allocation is not None:
        out["allocation"] = outcome.allocation.to_api()
    if outcome.error is not None:
        out["error"] = outcome.error
    if outcome.eviction is not None:
        out["eviction"] = outcome.eviction
    if outcome.status != "already-allocated":
        out["nodesTried"] = outcome.nodes_tried
    if explain:
        out["explain"] = [_explanation(node) for node in outcome.explanations]
    return out


def _pod(outcome: simulation.PodOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": outcome.pod.namespace,
        "name": outcome.pod.name,
        "status": outcome.status,
        "node": outcome.node,
        "claims": list(outcome.claims),
        "nodesTried": outcome.nodes_tried,
    }
    if outcome.pod.source:
        out["from"] = outcome.pod.source
    if outcome.error is not None:
        out["error"] = outcome.error
    return out


def _document(report: simulation.SimulationReport, *, explain: bool) -> dict[str, Any]:
    return {
        "searchOrder": report.search_order,
        "allAllocated": report.all_allocated,
        "pods": [_pod(p) for p in report.pods],
        "claims": [_outcome(o, explain=explain) for o in report.outcomes],
        "ignored": list(report.ignored),
    }


def _wrapped(text: str, *, indent: str) -> list[str]:
    return textwrap.wrap(
        text, width=TABLE_WIDTH, initial_indent=indent, subsequent_indent=indent + INDENT * 2
    )


def _selector_text(selector: model.NodeSelector) -> str:
    terms = []
    for term in selector.terms:
        requirements = [*term.match_expressions, *term.match_fields]
        terms.append(
            ", ".join(f"{r.key} {r.operator} [{' '.join(r.values)}]".rstrip() for r in requirements)
        )
    return " OR ".join(terms)


def _result_notes(allocation: model.AllocationResult) -> list[str]:
    """Shares taken, and binding conditions the pod waits for before it is bound."""
    lines: list[str] = []
    for r in allocation.results:
        if r.share_id is not None:
            consumed = ", ".join(
                f"{name} {value}" for name, value in r.to_api().get("consumedCapacity", {}).items()
            )
            lines.extend(
                _wrapped(f"{r.device}: a share ({consumed or 'no capacity'})", indent=INDENT)
            )
        if r.binding_conditions:
            text = (
                f"{r.device}: the pod waits for binding conditions "
                f"{', '.join(r.binding_conditions)} before it is bound"
            )
            lines.extend(_wrapped(text, indent=INDENT))
    return lines


def _table(report: simulation.SimulationReport, *, explain: bool) -> str:
    lines: list[str] = []
    for pod in report.pods:
        where = f"on node {pod.node or '-'}" if pod.node is not None else ""
        if pod.status == "unschedulable":
            where = f"({pod.nodes_tried} nodes tried, none fits all its claims)"
        source = f" [{pod.pod.source}]" if pod.pod.source else ""
        lines.append(f"pod {pod.pod.key}{source}: {pod.status} {where}".rstrip())
        if pod.claims:
            lines.extend(_wrapped(f"claims: {', '.join(pod.claims)}", indent=INDENT))
        if pod.error is not None and pod.status != "unschedulable":
            lines.extend(_wrapped(f"error: {pod.error}", indent=INDENT))
    for outcome in report.outcomes:
        if outcome.status == "unschedulable":
            where = f"({outcome.nodes_tried} nodes tried, none fits)"
        elif outcome.status == "already-allocated":
            where = "before this run"
        else:
            where = f"on node {outcome.node or '-'}"
        lines.append(f"{outcome.claim.key}: {outcome.status} {where}")
        if outcome.error is not None:
            lines.extend(_wrapped(f"error: {outcome.error}", indent=INDENT))
        if outcome.eviction is not None:
            lines.extend(_wrapped(f"eviction: {outcome.eviction}", indent=INDENT))
        if outcome.allocation is not None:
            rows = [("REQUEST", "DRIVER", "POOL", "DEVICE")] + [
                (
                    r.request + (" (admin)" if r.admin_access else ""),
                    r.driver,
                    r.pool,
                    r.device,
                )
                for r in outcome.allocation.results
            ]
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            for row in rows:
                cells = "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                )
                lines.append(INDENT + cells.rstrip())
            lines.extend(_result_notes(outcome.allocation))
            selector = outcome.allocation.node_selector
            if selector is not None:
                lines.extend(_wrapped(f"nodeSelector: {_selector_text(selector)}", indent=INDENT))
        if explain:
            for node_outcome in outcome.explanations:
                verdict = "fits" if node_outcome.fits else "does not fit"
                lines.append(f"{INDENT}on node {node_outcome.node or '-'}: {verdict}")
                for note in node_outcome.notes:
                    lines.extend(_wrapped(f"note: {note}", indent=INDENT * 2))
                for rejection in node_outcome.rejections:
                    text = f"{rejection.request}: {rejection.device}: {rejection.reason}"
                    lines.extend(_wrapped(text, indent=INDENT * 2))
            shown = len(outcome.explanations)
            if outcome.status == "unschedulable" and outcome.nodes_tried > shown:
                lines.append(f"{INDENT}... and {outcome.nodes_tried - shown} more nodes")
    lines.extend(_wrapped(f"search order: {report.search_order}", indent=""))
    return "\n".join(lines) + "\n"


@click.command(name="simulate", epilog=exits.epilog("a claim or pod that does not fit"))
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--slices", multiple=True, type=click.Path(exists=True), help="ResourceSlices.")
@click.option("--classes", multiple=True, type=click.Path(exists=True), help="DeviceClasses.")
@click.option(
    "--claims",
    multiple=True,
    type=click.Path(exists=True),
    help="ResourceClaims or ResourceClaimTemplates (and Nodes, for nodeSelector slices).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also read a live cluster (with only --context: $KUBECONFIG or ~/.kube/config).",
)
@click.option(
    "--context", "kube_context", default=None, help="Kubeconfig context; also reads the cluster."
)
@click.option("--node-name", "--node", "node", help="Allocate on this node only.")
@click.option("--explain", is_flag=True, help="Say why each device was not chosen.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(exits.OUTPUT_FORMATS),
    default="table",
    show_default=True,
)
@click.option(
    "--kubernetes-version",
    "-k",
    type=click.Choice(SUPPORTED_KUBERNETES_VERSIONS),
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    help="Scheduler behaviour to mimic (default: the newest supported; 1.33+: an All "
    "request must match a device; 1.36+: shared counters, device taints, consumable "
    "capacity and binding conditions; 1.38: all of these but consumable capacity locked on).",
)
@click.option("--debug", is_flag=True, help="Show a traceback for an unexpected error.")
@click.option(
    "--admin-access/--no-admin-access",
    default=True,
    show_default=True,
    help="The DRAAdminAccess feature gate.",
)
@options.feature_gates(
    help="A DRA scheduling gate the cluster sets differently from its release's default, "
    "e.g. DRAListTypeAttributes=true (alpha: list attributes, includes() in CEL, set "
    "semantics in matchAttribute and distinctAttribute).",
)
def command(
    paths: tuple[str, ...],
    slices: tuple[str, ...],
    classes: tuple[str, ...],
    claims: tuple[str, ...],
    kubeconfig: Path | None,
    kube_context: str | None,
    node: str | None,
    explain: bool,
    output: str,
    kubernetes_version: str,
    admin_access: bool,
    feature_gates: dict[str, bool],
    debug: bool,
) -> None:
    """Dry-run the scheduler's structured allocation for Pods and ResourceClaims.

    PATHS, --slices, --classes and --claims are files or directories of YAML/JSON
    manifests (multi-document files and List kinds are fine; objects are sorted by
    kind). Each Pod (or replica of a Deployment, StatefulSet, Job, ...) gets all its
    claims allocated together on one node; claims from templates are generated per pod.
    Pools and slices are searched in name order, so the result is repeatable; the
    scheduler may pick other, equivalent devices.
    """
    settings = _settings(kubernetes_version, admin_access=admin_access, gates=feature_gates)
    documents = _documents([*paths, *slices, *classes, *claims])
    if kubeconfig is not None or kube_context is not None:
        documents.extend(_read_cluster(kubeconfig, kube_context))
    try:
        inputs = manifests.decode_objects(documents)
    except manifests.ManifestError as error:
        raise BadInput(str(error)) from None
    if not inputs.claims and not inputs.pods:
        raise BadInput("no ResourceClaim, ResourceClaimTemplate or Pod using claims in the input")
    report = simulation.simulate(
        inputs,
        node_name=node,
        explain=explain,
        settings=settings,
    )
    document = _document(report, explain=explain)
    if output == "json":
        click.echo(json.dumps(document, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(document, sort_keys=False, width=TABLE_WIDTH), nl=False)
    else:
        click.echo(_table(report, explain=explain), nl=False)
    raise SystemExit(EXIT_ALLOCATED if report.all_allocated else EXIT_NOT_ALLOCATED)
