"""The driver image's Dockerfile, checked for structure (no Docker engine needed).

Pinned base images, ``dralet run`` as the exec-form entrypoint, the build stage
unprivileged, root in the final stage only with the reason written above it, the
DaemonSet's ports exposed, and a build context (.dockerignore) that holds what the
build copies.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
HEALTH_PORT = 51515
METRICS_PORT = 9400


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    comments: tuple[str, ...]
    """The comment lines directly above the instruction."""


def parse(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    comments: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and stripped.startswith("#"):
            comments.append(stripped.lstrip("# "))
            continue
        if not stripped:
            if not pending:
                comments = []
            continue
        pending += stripped.removesuffix("\\").strip() + " "
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), tuple(comments)))
        pending, comments = "", []
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    found: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def test_base_images_are_pinned(instructions: list[Instruction]) -> None:
    args = {
        name: value
        for i in instructions
        if i.keyword == "ARG" and "=" in i.arguments
        for name, value in [i.arguments.split("=", 1)]
    }
    images = [i.arguments.split()[0] for i in instructions if i.keyword == "FROM"]
    assert images
    for image in images:
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        name, _, tag = resolved.rpartition(":")
        assert name, f"{image} has no tag"
        assert tag != "latest"
        assert re.fullmatch(r"\d+\.\d+\.\d+-slim-\w+", tag), f"{resolved}: pin a slim version"


def test_entrypoint_is_dralet_run(instructions: list[Instruction]) -> None:
    (entrypoint,) = [i for i in instructions if i.keyword == "ENTRYPOINT"]
    assert json.loads(entrypoint.arguments) == ["dralet", "run"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "dralet" in scripts


def test_only_the_final_stage_is_root_and_says_why(instructions: list[Instruction]) -> None:
    *build_stages, final = stages(instructions)
    for stage in build_stages:
        users = [i for i in stage if i.keyword == "USER"]
        assert users, "build stages run unprivileged"
        builds = [n for n, i in enumerate(stage) if i.keyword == "RUN" and "pip" in i.arguments]
        assert builds
        assert min(builds) > stage.index(users[0]), "the build itself runs unprivileged"
        assert all(not u.arguments.startswith("0") and u.arguments != "root" for u in users)
    (user,) = [i for i in final if i.keyword == "USER"]
    assert user.arguments == "0:0"
    reason = " ".join(user.comments).lower()
    assert "root" in reason
    assert "kubelet" in reason
    assert "/var/lib/kubelet/plugins_registry" in reason


def test_exposes_the_health_and_metrics_ports(instructions: list[Instruction]) -> None:
    exposed = {p for i in instructions if i.keyword == "EXPOSE" for p in i.arguments.split()}
    assert exposed == {f"{HEALTH_PORT}/tcp", f"{METRICS_PORT}/tcp"}


def test_build_context_holds_what_the_build_copies(instructions: list[Instruction]) -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            bare = pattern.removeprefix("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
                keep = negated
        return keep

    copied = [
        source
        for i in instructions
        if i.keyword == "COPY" and "--from" not in i.arguments
        for source in [w for w in i.arguments.split() if not w.startswith("--")][:-1]
    ]
    assert copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert included(source.rstrip("/")), f"{source} is excluded by .dockerignore"
    assert not included(".venv")
    assert not included(".git")
    assert not included("src/dralet/__pycache__")
