from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostdev.fakehost import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A node root short enough for unix socket paths."""
    with tempfile.TemporaryDirectory(prefix="hostdev-") as root:
        yield Path(root)
