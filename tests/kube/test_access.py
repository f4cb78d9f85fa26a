"""API access resolves like kubectl's: flag, $KUBECONFIG, in-cluster, ~/.kube/config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dralet.kube import access


def _files(*present: str) -> object:
    return lambda path: str(path) in present


def test_flag_wins_and_must_exist(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("{}")
    got = access.resolve(kubeconfig=kubeconfig, environ={"KUBECONFIG": "/other"}, home=tmp_path)
    assert got is not None and got.source == "--kubeconfig" and got.kubeconfig == str(kubeconfig)
    with pytest.raises(access.ApiAccessError, match=r"/nonexistent\.yaml: no such file"):
        access.resolve(kubeconfig=Path("/nonexistent.yaml"), environ={}, home=tmp_path)


def test_kubeconfig_env_is_a_merged_list_and_a_typo_is_an_error(tmp_path: Path) -> None:
    env = {"KUBECONFIG": os.pathsep.join(["/a", "/missing", "/b"])}
    got = access.resolve(environ=env, home=tmp_path, is_file=_files("/a", "/b"))  # type: ignore[arg-type]
    assert got is not None and got.source == "$KUBECONFIG"
    assert got.kubeconfig == os.pathsep.join(["/a", "/b"])
    with pytest.raises(access.ApiAccessError, match=r"\$KUBECONFIG names no existing file"):
        access.resolve(environ={"KUBECONFIG": "/typo"}, home=tmp_path, is_file=_files())  # type: ignore[arg-type]


def test_in_cluster_comes_before_the_home_kubeconfig(tmp_path: Path) -> None:
    home_config = str(tmp_path / ".kube" / "config")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    got = access.resolve(environ=env, home=tmp_path, is_file=_files(home_config))  # type: ignore[arg-type]
    assert got is not None and got.kind == "in-cluster"
    got = access.resolve(environ={}, home=tmp_path, is_file=_files(home_config), context="c")  # type: ignore[arg-type]
    assert got is not None and got.source == "~/.kube/config" and got.context == "c"


def test_nothing_configured_is_none(tmp_path: Path) -> None:
    assert access.resolve(environ={}, home=tmp_path, is_file=_files()) is None  # type: ignore[arg-type]
    url = access.resolve(url="http://127.0.0.1:1", environ={}, home=tmp_path)
    assert url is not None and url.kind == "url"
