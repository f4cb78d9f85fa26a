"""Every command test starts with no API access of the machine's own: no $KUBECONFIG,
no service account, an empty home (so no ~/.kube/config) unless the test makes one."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The home directory every command test runs with (empty unless the test fills it)."""
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def _no_ambient_kube_access(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    home.mkdir()
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(home))
