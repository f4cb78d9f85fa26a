"""The claim route a newcomer reads: the files of ``dralet.node`` one prepare and one
unprepare run code in, traced, are the ones docs/how-it-works.md names, and at most 8."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import dralet.node
from dralet.drivers.example import SimulatedGPUs
from dralet.testing import MemoryClaims, node_settings
from dralet.testing.claims import NODE, allocated_claim
from dralet.testing.node import RunningNode, running_node

NODE_DIR = Path(dralet.node.__file__).parent
DOCS = Path(__file__).parents[2] / "docs" / "how-it-works.md"
MOST_FILES = 8


def _named_in_docs() -> set[str]:
    text = DOCS.read_text()
    start = text.index("One `NodePrepareResources` runs code in these")
    paragraph = text[start : text.index("An unprepare takes", start)]
    return set(re.findall(r"`((?:claims/)?[a-z]+\.py)`", paragraph))


@contextmanager
def _files_run() -> Iterator[set[str]]:
    """Every file under ``dralet/node/`` a Python function of runs in (any thread)."""
    seen: set[str] = set()
    root = f"{NODE_DIR}/"

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.add(frame.f_code.co_filename.removeprefix(root))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


async def _route(
    tmp_path: Path, traced: Callable[[RunningNode, dict[str, Any]], Awaitable[object]]
) -> set[str]:
    claims = MemoryClaims()
    warm = claims.add(allocated_claim("warm", devices=[("r0", "gpu-0")]))
    claim = claims.add(allocated_claim("traced", devices=[("r0", "gpu-1")]))
    backend = SimulatedGPUs(state_dir=tmp_path / "gpus", node_name=NODE, count=2)
    async with running_node(node_settings(tmp_path), backend, claims=claims) as node:
        # Once through first: what runs once per process (imports, caches) is not the route.
        await node.prepare(warm)
        await node.unprepare(warm)
        await node.settled()
        if traced is _unprepare:
            await _prepare(node, claim)
        with _files_run() as seen:
            await traced(node, claim)
        await node.settled()
    return seen


async def _prepare(node: RunningNode, claim: dict[str, Any]) -> object:
    result = await node.prepare(claim)
    assert not result.claims[claim["metadata"]["uid"]].error
    return result


async def _unprepare(node: RunningNode, claim: dict[str, Any]) -> object:
    result = await node.unprepare(claim)
    assert not result.claims[claim["metadata"]["uid"]]
    return result


async def test_a_prepare_runs_code_in_the_files_the_docs_name_and_at_most_8(
    tmp_path: Path,
) -> None:
    seen = await _route(tmp_path, _prepare)
    assert seen == _named_in_docs()
    assert len(seen) <= MOST_FILES


async def test_an_unprepare_takes_teardown_in_place_of_prepare(tmp_path: Path) -> None:
    seen = await _route(tmp_path, _unprepare)
    assert seen == _named_in_docs() - {"claims/prepare.py"} | {"claims/teardown.py"}
    assert len(seen) <= MOST_FILES
