"""Every command on the site runs, page by page, and prints what the page shows.

Each page's commands run in order in one temporary directory of their own (holding a
copy of the repository's ``deploy/``, as a checkout has, and the files the page shows
with a title), by bash, with this virtual environment's ``dralet`` first on ``PATH`` and
``make helm``'s helm beside it. The conventions are in ``tests/docs/pages.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.conftest import helm_binary
from tests.docs import pages

PAGE_TIMEOUT_S = 240
"""One page's commands together: the slowest page plays dralet conformance."""

RUN_PAGES = [page for page in pages.pages() if page.runs]


def test_shell_is_only_shown_as_console_blocks() -> None:
    wrong = [
        f"{block.where()}: ```{block.language or '(plain)'} with shell: make it ```console"
        for page in pages.pages()
        for block in page.blocks
        if (block.language in pages.SHELL_LANGUAGES and not block.title)
        or (block.language in ("", "text") and any(line.startswith("$ ") for line in block.body))
    ]
    assert not wrong, "\n".join(wrong)


def test_every_skipped_block_says_why() -> None:
    for page in pages.pages():
        for block in page.console_blocks:
            assert block.skip is None or block.skip.strip(), f"{block.where()}: skip without why"
            for command in pages.commands(block):
                assert command.text.strip(), f"{block.where()}: an empty command"


def test_the_output_matcher() -> None:
    shown = ("first", pages.ANY_LINES, "last")
    assert pages.output_matches(shown, ["first", "last"])
    assert pages.output_matches(shown, ["first", "a", "b", "last  "])
    assert not pages.output_matches(shown, ["first", "a"])
    assert not pages.output_matches(("only",), ["only", "more"])
    assert pages.output_matches(("claim ... found",), ["claim 5f0e2a9c found"])
    assert not pages.output_matches(("claim ... found",), ["claim 5f0e2a9c lost"])
    assert pages.output_matches(("uid  ...        name",), ["uid  5f0e2a9c  name"])


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """The page's directory: short, as the unix socket paths of drivers started in it
    must be (108 bytes at most)."""
    with tempfile.TemporaryDirectory(prefix="dralet-docs-") as path:
        yield Path(path)


@pytest.mark.e2e  # pages start drivers, the demo and conformance as processes
@pytest.mark.timeout(PAGE_TIMEOUT_S + 30)
@pytest.mark.parametrize(
    "page", RUN_PAGES, ids=[str(p.path.relative_to(pages.DOCS)) for p in RUN_PAGES]
)
def test_the_commands_of_the_page(page: pages.Page, work_dir: Path) -> None:
    shutil.copytree(pages.ROOT / "deploy", work_dir / "deploy")
    tools = [str(Path(sys.executable).parent)]
    if any("helm " in c.text for b in page.console_blocks for c in pages.commands(b)):
        tools.append(str(Path(helm_binary()).parent))  # skips, or fails in CI, without it
    path = os.pathsep.join((*tools, os.environ["PATH"]))
    env = {
        **os.environ,
        "PATH": path,
        "HELM_CONFIG_HOME": str(work_dir / ".helm" / "config"),
        "HELM_CACHE_HOME": str(work_dir / ".helm" / "cache"),
        "HELM_DATA_HOME": str(work_dir / ".helm" / "data"),
    }
    # No cluster of this machine's, and tables as wide as the pages show them.
    for name in ("KUBECONFIG", "COLUMNS", "LINES"):
        env.pop(name, None)
    ran = 0
    for block in page.blocks:
        if block.title and block.language != "console":
            shown = work_dir / block.title
            shown.parent.mkdir(parents=True, exist_ok=True)
            shown.write_text("\n".join(block.body) + "\n", encoding="utf-8")
        if block.language != "console" or block.skip is not None:
            continue
        block_commands = pages.commands(block)
        results = _run(block_commands, cwd=work_dir, env=env)
        for index, (command, (status, output)) in enumerate(
            zip(block_commands, results, strict=True)
        ):
            following = block_commands[index + 1].text if index + 1 < len(block_commands) else ""
            where = f"{page.path.relative_to(pages.ROOT)}:{command.line}: $ {command.text}"
            assert status == 0 or following == pages.STATUS_COMMAND, (
                f"{where}\nexited {status}:\n" + "\n".join(output)
            )
            if command.expected:
                assert pages.output_matches(command.expected, output), (
                    f"{where}\nthe page shows:\n"
                    + "\n".join(command.expected)
                    + "\nit printed:\n"
                    + "\n".join(output)
                )
            ran += 1
    assert ran, f"{page.path}: no command ran"


def _run(
    commands: list[pages.Command], *, cwd: Path, env: dict[str, str]
) -> list[tuple[int, list[str]]]:
    """Run a block's commands in one bash, in order; each one's status and output lines.

    After each command bash prints a marker line with its status and puts that status
    back in ``$?``, so a following ``echo $?`` shows it. Background processes a block
    starts end with it (the block runs in a session of its own)."""
    marker = f"--dralet-docs-{uuid.uuid4().hex}--"
    script = ["exec 2>&1"]
    for command in commands:
        script.append(command.text)
        script.append(f"__status=$?; printf '\\n{marker} %d\\n' \"$__status\"; (exit $__status)")
    log = cwd / f".{marker}.log"
    with log.open("w", encoding="utf-8") as sink:
        # A file, not a pipe: a background process would hold a pipe open past the block.
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", "\n".join(script)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            text=True,
            start_new_session=True,
        )
        try:
            process.wait(timeout=PAGE_TIMEOUT_S)
        finally:
            # Whatever the block left running in the background (a driver, say) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    out = log.read_text(encoding="utf-8", errors="replace")
    log.unlink()
    results: list[tuple[int, list[str]]] = []
    chunk: list[str] = []
    for line in out.split("\n"):
        if line.startswith(marker):
            if chunk and chunk[-1] == "":
                chunk.pop()  # the newline the marker's printf put before itself
            results.append((int(line.split()[-1]), chunk))
            chunk = []
        else:
            chunk.append(line)
    assert len(results) == len(commands), f"the block stopped early:\n{out}"
    return results
