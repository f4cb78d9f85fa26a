"""Fixtures for the real-runtime suites: podman availability and a baseline container.

Runtime tests skip, with the reason ``podman.available()`` gives, only when this
machine cannot run podman (CI installs it, so there they run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.harness import podman


@pytest.fixture(autouse=True)
def _skip_runtime_tests_without_podman(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("runtime") is None:
        return
    state = podman.available()
    if not state:
        pytest.skip(f"no real CDI consumer here: {state.reason}")


@pytest.fixture(scope="session")
def podman_settings() -> podman.PodmanSettings:
    state = podman.available()
    if not state:
        pytest.skip(f"no real CDI consumer here: {state.reason}")
    return podman.PodmanSettings()


@pytest.fixture(scope="session")
def baseline(
    podman_settings: podman.PodmanSettings, tmp_path_factory: pytest.TempPathFactory
) -> podman.ContainerRun:
    """A container given no CDI device: what every container has anyway."""
    empty = tmp_path_factory.mktemp("cdi-empty")
    run = podman.run_container(empty, [], settings=podman_settings)
    assert run.ok, run.stderr
    return run


@pytest.fixture
def cdi_dir(tmp_path: Path) -> Path:
    path = tmp_path / "cdi"
    path.mkdir()
    return path
