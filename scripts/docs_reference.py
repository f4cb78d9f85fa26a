"""Reference pages made from their one source when the site is built (an MkDocs hook).

- ``reference/metrics.md``: every metric ``dralet.metrics.DriverMetrics`` registers, with
  its type, labels and help text, as a driver's ``/metrics`` exposes it.
- ``reference/helm-values.md``: every value of ``deploy/chart/dralet/values.schema.json``
  with the rule the schema sets, its default from ``values.yaml`` and the comment above it
  there.

Run by hand (``python scripts/docs_reference.py metrics|helm-values``) it prints the page.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "chart" / "dralet"

# The suffixes a metric family's samples carry in the text exposition format.
_SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def metrics_page() -> str:
    """The metrics of one driver, in the order ``DriverMetrics`` creates them."""
    from dralet.metrics import DriverMetrics

    metrics = DriverMetrics()
    lines = [
        "# Metrics",
        "",
        "What `dralet run` exposes on `--metrics-port` (chart: `metricsPort`, 9400) at",
        "`/metrics`, in the Prometheus text format. Generated from `dralet.metrics`.",
        "",
        "| Metric | Type | Labels | Meaning |",
        "|---|---|---|---|",
    ]
    for collector in vars(metrics).values():
        labels: tuple[str, ...] | None = getattr(collector, "_labelnames", None)
        if labels is None:
            continue
        (family,) = collector.describe()
        names = [family.name + suffix for suffix in _SAMPLE_SUFFIXES.get(family.type, ("",))]
        shown = "<br>".join(f"`{name}`" for name in names)
        label_text = ", ".join(f"`{label}`" for label in labels) or "-"
        lines.append(f"| {shown} | {family.type} | {label_text} | {_cell(family.documentation)} |")
    return "\n".join(lines) + "\n"


def helm_values_page() -> str:
    """Every chart value: its path, the schema's rule, its default and its comment."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    defaults = yaml.safe_load(values_text)
    comments = dict(_value_comments(values_text))
    lines = [
        "# Helm values",
        "",
        "Every value of the chart in `deploy/chart/dralet`, generated from its",
        "`values.schema.json` (which refuses any other value, and any value breaking the rule",
        "shown) and the defaults and comments of its `values.yaml`. How to use them:",
        "[Install on a cluster](../install.md).",
        "",
        "| Value | Rule | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for path, node in _schema_values(schema):
        default = _lookup(defaults, path)
        nested = "properties" in node
        shown_default = "-" if default is _MISSING or nested else f"`{json.dumps(default)}`"
        meaning = node.get("description") or comments.get(path, "")
        lines.append(
            f"| `{'.'.join(path)}` | {_cell(_rule(node))} | {_cell(shown_default)} "
            f"| {_cell(meaning)} |"
        )
    return "\n".join(lines) + "\n"


_MISSING = object()


def _schema_values(
    node: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    for name, child in node.get("properties", {}).items():
        yield (*path, name), child
        yield from _schema_values(child, (*path, name))


def _lookup(values: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(values, dict) or name not in values:
            return _MISSING
        values = values[name]
    return values


def _rule(node: dict[str, Any]) -> str:
    kinds = node.get("type", "")
    parts = [" or ".join(kinds) if isinstance(kinds, list) else kinds]
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"]))
    if "pattern" in node:
        parts.append(f"matches `{node['pattern']}`")
    for key, text in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >=")):
        if key in node:
            parts.append(f"{text} {node[key]}")
    if node.get("additionalProperties") is False:
        parts.append("no other keys")
    if "not" in node and "const" in node["not"]:
        parts.append(f"not `{json.dumps(node['not']['const'])}`")
    return ", ".join(part for part in parts if part) or "any"


def _value_comments(text: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """The comment block right above each key of ``values.yaml``, keyed by its path."""
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        key = re.match(r"^(\s*)([A-Za-z][\w-]*):", line)
        if key is None:
            comment = []
            continue
        indent = len(key.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group(2)))
        if comment:
            yield tuple(name for _, name in stack), " ".join(comment)
        comment = []


def _cell(text: str) -> str:
    """Text as one table cell: ``<driverName>`` shown, not read as HTML, and pipes kept
    from ending the cell."""
    spans = re.split(r"(`[^`]*`)", text.replace("\n", " "))
    return "".join(_cell_span(span) for span in spans)


def _cell_span(span: str) -> str:
    # A pipe ends a table cell even inside a code span: such a span becomes HTML code.
    if span.startswith("`") and "|" in span:
        return "<code>" + html.escape(span[1:-1]).replace("|", "&#124;") + "</code>"
    if span.startswith("`"):
        return span
    return html.escape(span, quote=False).replace("|", "\\|")


PAGES = {"reference/metrics.md": metrics_page, "reference/helm-values.md": helm_values_page}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for name, page in PAGES.items():
        files.append(File.generated(config, name, content=page()))
    return files


if __name__ == "__main__":
    sys.stdout.write(PAGES[f"reference/{sys.argv[1]}.md"]())
