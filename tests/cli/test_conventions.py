"""What every command shares: the exit-status table in ``--help`` (one source, also on
the docs' exit-status page), kubectl's API flags resolved in kubectl's order,
``--node-name``, and one ``-o`` choice set."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner
from tests import claimstore

from dralet import releases
from dralet.apiserver import ApiServerThread
from dralet.cli import exits, main
from dralet.cluster import ControlPlane

EXIT_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "exit-codes.md"
API_COMMANDS = ("run", "audit", "simulate", "conformance")
NODE_COMMANDS = ("run", "audit", "simulate", "conformance")


def command(name: str) -> click.Command:
    found = main.cli.get_command(click.Context(main.cli), name)
    assert found is not None
    return found


def flags(name: str) -> set[str]:
    return {opt for param in command(name).params for opt in (*param.opts, *param.secondary_opts)}


def help_text(name: str, columns: int = 80) -> str:
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(main.cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", list(main.COMMANDS))
def test_every_help_ends_with_the_exit_table(name: str) -> None:
    text = help_text(name)
    assert "Exit status:" in text
    table = text[text.index("Exit status:") :]
    for code, _ in exits.EXIT_TABLE:
        assert re.search(rf"^\s+{code}\s+\S", table, re.MULTILINE), (code, table)
    assert "bad input: usage, unreadable or unusable files" in table
    assert all(len(line) <= 80 for line in text.splitlines()), text


def test_a_status_of_its_own_comes_with_its_reason() -> None:
    table = help_text("run")
    assert re.search(r"^\s+78\s+a plugin, registry, CDI or state dir is unusable", table, re.M)


def test_the_docs_list_the_table_once() -> None:
    page = EXIT_PAGE.read_text()
    rows = re.findall(r"^\| `(\d+)` \| (.+?) \|$", page, re.MULTILINE)
    assert [(int(code), text) for code, text in rows] == list(exits.EXIT_TABLE)


@pytest.mark.parametrize("name", API_COMMANDS)
def test_commands_that_talk_to_the_api_take_kubectl_flags(name: str) -> None:
    assert {"--kubeconfig", "--context"} <= flags(name)


@pytest.mark.parametrize("name", NODE_COMMANDS)
def test_the_node_is_node_name_everywhere(name: str) -> None:
    assert "--node-name" in flags(name)


def test_simulate_keeps_node_as_an_alias() -> None:
    assert "--node" in flags("simulate")


@pytest.mark.parametrize("name", list(main.COMMANDS))
def test_one_output_choice_set(name: str) -> None:
    outputs = [p for p in command(name).params if "--output" in p.opts]
    if name == "run":
        assert not outputs  # a daemon: its output is its log (--log-format)
        return
    [option] = outputs
    assert "-o" in option.opts
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == exits.OUTPUT_FORMATS


@pytest.fixture
def api() -> Iterator[ApiServerThread]:
    with ApiServerThread() as server:
        server.call(ControlPlane(server.server).add_node)
        yield server


def two_contexts(path: Path, url: str) -> Path:
    """A kubeconfig whose current context is a dead cluster; ``standin`` is ``url``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "dead", "cluster": {"server": "http://127.0.0.1:1"}},
                    {"name": "standin", "cluster": {"server": url}},
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "dead", "context": {"cluster": "dead", "user": "u"}},
                    {"name": "standin", "context": {"cluster": "standin", "user": "u"}},
                ],
                "current-context": "dead",
            }
        )
    )
    return path


def run_audit(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    plugin_dir = tmp_path / "plugins" / "gpu.example.com"
    claimstore.create_store(plugin_dir)
    args = ["audit", "--node-name", "node-a", "--plugin-dir", str(plugin_dir)]
    args += ["--cdi-dir", str(tmp_path / "cdi"), "-o", "json", *extra]
    result = CliRunner(env=env).invoke(main.cli, args)
    return result.exit_code, result.output


def test_context_picks_the_cluster(api: ApiServerThread, tmp_path: Path) -> None:
    config = two_contexts(tmp_path / "kubeconfig", api.url)
    code, out = run_audit(tmp_path, "--kubeconfig", str(config), "--context", "standin")
    assert code == 0, out
    assert yaml.safe_load(out)["sources"]["api"]["server"] == api.url
    code, out = run_audit(tmp_path, "--kubeconfig", str(config))
    assert code == 2, out  # the current context: a cluster that is not there
    assert "127.0.0.1:1" in out and len(out.strip().splitlines()) == 1


def test_kubeconfig_env_then_home_config(api: ApiServerThread, tmp_path: Path, home: Path) -> None:
    config = two_contexts(tmp_path / "from-env", api.url)
    code, out = run_audit(tmp_path, "--context", "standin", env={"KUBECONFIG": str(config)})
    assert code == 0, out
    assert yaml.safe_load(out)["sources"]["api"]["consulted"] is True
    two_contexts(home / ".kube" / "config", api.url)
    code, out = run_audit(tmp_path, "--context", "standin")
    assert code == 0, out
    assert yaml.safe_load(out)["sources"]["api"]["server"] == api.url


def test_a_named_kubeconfig_that_is_missing_is_one_line_exit_2(tmp_path: Path) -> None:
    for name in ("audit", "simulate"):
        args = [name, "--kubeconfig", str(tmp_path / "nope.yaml")]
        if name == "audit":
            claimstore.create_store(tmp_path / "plugins")
            args += ["--node-name", "n", "--plugin-dir", str(tmp_path / "plugins")]
        else:
            args += [str(Path(__file__).parent / "simulate_fixtures")]
        result = CliRunner().invoke(main.cli, args)
        assert result.exit_code == 2, (name, result.output)
        assert "nope.yaml: no such file" in result.output
        assert "Traceback" not in result.output


def test_simulate_reads_the_cluster_of_the_context(api: ApiServerThread, tmp_path: Path) -> None:
    config = two_contexts(tmp_path / "kubeconfig", api.url)
    pod = tmp_path / "claim.yaml"
    pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "r", "exactly": {"deviceClassName": "gpu.example.com"}}
                        ]
                    }
                },
            }
        )
    )
    args = ["simulate", str(pod), "-o", "json"]
    dead = CliRunner().invoke(main.cli, [*args, "--kubeconfig", str(config)])
    assert dead.exit_code == 2, dead.output
    live = CliRunner().invoke(
        main.cli, [*args, "--kubeconfig", str(config), "--context", "standin"]
    )
    assert live.exit_code in (0, 1), live.output
    assert "reading the cluster" not in live.output


def test_conformance_finds_the_api_like_kubectl(tmp_path: Path) -> None:
    result = CliRunner().invoke(main.cli, ["conformance", "--socket", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "claims need an API server" in result.output
    config = tmp_path / "missing"
    result = CliRunner(env={"KUBECONFIG": str(config)}).invoke(
        main.cli, ["conformance", "--socket", str(tmp_path / "s")]
    )
    assert result.exit_code == 2
    assert "$KUBECONFIG names no existing file" in result.output


@pytest.mark.parametrize("name", ["validate", "simulate", "demo", "conformance"])
def test_one_default_kubernetes_version_the_newest_each_command_supports(name: str) -> None:
    [option] = [p for p in command(name).params if "--kubernetes-version" in p.opts]
    assert isinstance(option.type, click.Choice)
    choices = tuple(option.type.choices)
    assert set(choices) <= set(releases.KUBERNETES_RELEASES)
    assert choices[0] == releases.KUBERNETES_RELEASES[0]  # the floor everywhere
    assert option.default == releases.newest(choices) == choices[-1]


def test_commands_that_play_a_cluster_default_to_the_current_release() -> None:
    current = releases.KUBERNETES_RELEASES[-1]
    assert current == "1.38"
    for name in ("demo", "conformance"):
        [option] = [p for p in command(name).params if "--kubernetes-version" in p.opts]
        assert option.default == current, name


def test_ctrl_c_is_130_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dralet.validation import engine

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "validate_paths", interrupted)
    manifest = tmp_path / "m.yaml"
    manifest.write_text("{}\n")
    result = CliRunner().invoke(main.cli, ["validate", str(manifest)])
    assert result.exit_code == exits.INTERRUPTED == 130
    assert result.stderr == "interrupted\n"
