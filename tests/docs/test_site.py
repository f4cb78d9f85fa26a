"""The site builds with ``mkdocs build --strict`` (a broken link or anchor between pages
fails it), every page and block renders, the generated reference pages hold what their
sources hold, and the README's links lead to files that exist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import dralet
from dralet.cli import main
from dralet.metrics import DriverMetrics
from tests.docs import pages

BUILD_TIMEOUT_S = 180
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=pages.ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, build.stderr
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f}s")
    return out


def _text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return re.sub(r"<[^>]+>", "", html)


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((pages.ROOT / "mkdocs.yml").read_text())
    listed = set(re.findall(r"[\w/-]+\.md", json.dumps(config["nav"])))
    on_disk = {str(p.relative_to(pages.DOCS)) for p in pages.DOCS.rglob("*.md")}
    generated = {"reference/metrics.md", "reference/helm-values.md"}
    assert listed == on_disk | generated


def test_every_block_renders_as_a_block(site: Path) -> None:
    # A fence Markdown did not take (an option it refuses, say) shows its backticks.
    broken = [str(p) for p in site.rglob("*.html") if "```" in p.read_text(encoding="utf-8")]
    assert not broken


def test_the_cli_reference_has_every_command(site: Path) -> None:
    text = _text(site, "reference/cli")
    for name in main.COMMANDS:
        assert f"dralet {name} [OPTIONS]" in text, name


def test_the_api_reference_has_the_public_names(site: Path) -> None:
    text = _text(site, "reference/api")
    missing = [name for name in dralet.__all__ if name not in text]
    assert not missing, missing


def test_the_metrics_reference_has_every_metric(site: Path) -> None:
    text = _text(site, "reference/metrics")
    families = [m.name for m in DriverMetrics().registry.collect()]
    assert families
    for family in families:
        assert family in text, family


def test_the_helm_values_reference_has_every_value(site: Path) -> None:
    text = _text(site, "reference/helm-values")
    schema = json.loads((pages.ROOT / "deploy/chart/dralet/values.schema.json").read_text())
    for name in schema["properties"]:
        assert name in text, name
    assert "&lt;driverName&gt;" in (site / "reference/helm-values/index.html").read_text()


def test_the_readme_keeps_its_two_commands() -> None:
    readme = (pages.ROOT / "README.md").read_text(encoding="utf-8")
    assert "```sh\nmake demo\n```" in readme
    assert "```sh\nmake test\n```" in readme


def test_the_readme_links_resolve() -> None:
    readme = pages.ROOT / "README.md"
    missing = [
        target
        for target in _LINK.findall(readme.read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith("#")
        and not (readme.parent / target.split("#")[0]).exists()
    ]
    assert not missing


def test_the_pages_link_nowhere_outside_the_site() -> None:
    # mkdocs checks links between pages; one out of docs/ would be broken on the site.
    outside = [
        f"{page.path.relative_to(pages.ROOT)}: {target}"
        for page in pages.pages()
        for target in _LINK.findall(page.path.read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith("#")
        and not (page.path.parent / target.split("#")[0]).resolve().is_relative_to(pages.DOCS)
    ]
    assert not outside
