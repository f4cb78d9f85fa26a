"""The site's pages as the docs tests read them: fenced blocks, the commands in them, and
the files the pages show.

The convention every page follows:

- a command is a line starting with ``$ `` in a ```` ```console ```` block; a line ending
  in ``\\`` goes on with the next one. The lines after it, up to the next command, are
  the output the page shows: compared line by line (trailing blanks aside), where a
  line ``...`` stands for any number of lines and ``...`` within a line for any text
  (a UID the API server made, say). A command that shows no output is not
  checked for any;
- a command must exit 0, unless the next one is ``echo $?``, which shows its status;
- ```` ``` { .console skip="why" } ```` marks a block that cannot run in a test (a GPU,
  a cluster), with the reason (the brace form: the site's Markdown takes options
  besides a title only in it);
- a block with a title (```` ```yaml title="gpu.yaml" ````) is a file the commands after
  it read: it is written under that name before they run;
- shell is never shown in a ``sh``/``bash``/``shell`` block (unless it is a file, with a
  title) or in a plain block with a ``$`` prompt: those would go untested.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

ANY_LINES = "..."
"""An output line that stands for any number of lines."""
STATUS_COMMAND = "echo $?"
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "zsh", "shell-session"})

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Command:
    """One ``$`` command of a console block and the output the page shows for it."""

    text: str
    expected: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int
    language: str
    options: dict[str, str]
    body: tuple[str, ...]

    @property
    def skip(self) -> str | None:
        return self.options.get("skip")

    @property
    def title(self) -> str | None:
        return self.options.get("title")

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Page:
    """A page's blocks, in order."""

    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def console_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.language == "console"]

    @property
    def runs(self) -> bool:
        return any(b.skip is None for b in self.console_blocks)


def pages() -> list[Page]:
    """Every Markdown page of the site, in name order."""
    return [read_page(path) for path in sorted(DOCS.rglob("*.md"))]


def read_page(path: Path) -> Page:
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language, options = _info(opening["info"])
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][indent:])
            end += 1
        page.blocks.append(Block(path, index + 1, language, options, tuple(body)))
        index = end + 1
    return page


def _info(info: str) -> tuple[str, dict[str, str]]:
    words = shlex.split(info.strip().lstrip("{").rstrip("}"))
    language = words[0].lstrip(".") if words and "=" not in words[0] else ""
    options = dict(word.split("=", 1) for word in words if "=" in word)
    return language, options


def commands(block: Block) -> list[Command]:
    """The commands of a console block, each with the output shown after it."""
    found: list[Command] = []
    text: list[str] = []
    output: list[str] = []
    start = 0
    for number, line in enumerate(block.body, start=block.line + 1):
        if text and text[-1].endswith("\\") and not output:
            text.append(line)
        elif line.startswith("$ "):
            if text:
                found.append(Command("\n".join(text), tuple(output), start))
            text, output, start = [line[2:]], [], number
        elif text:
            output.append(line)
        elif line.strip():
            raise ValueError(f"{block.where()}: output before the first $ command: {line!r}")
    if text:
        found.append(Command("\n".join(text), tuple(_trim(output)), start))
    return found


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _line_matches(shown: str, printed: str) -> bool:
    if ANY_LINES not in shown:
        return shown == printed
    # The blanks beside a wildcard are its own: a UID's column keeps its width on the page.
    parts = shown.split(ANY_LINES)
    parts = [parts[0].rstrip(), *(p.strip() for p in parts[1:-1]), parts[-1].lstrip()]
    pattern = ".*".join(re.escape(part) for part in parts)
    return re.fullmatch(pattern, printed) is not None


def output_matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """Whether the shown lines match the real ones; ``...`` takes any number of lines."""
    want = [line.rstrip() for line in expected]
    got = [line.rstrip() for line in actual]

    # Plain backtracking: pages show a few dozen lines at most.
    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == ANY_LINES:
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and _line_matches(want[i], got[j]) and match(i + 1, j + 1)

    return match(0, 0)
