"""Entry point of the ``dralet`` command; subcommands are imported on first use."""

from __future__ import annotations

import importlib
import sys

import click

from dralet.cli import exits

__all__ = ["cli", "main"]

# name -> (module, one-line help); modules expose ``command``.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("dralet.cli.run", "Run a DRA driver on this node (the DaemonSet entrypoint)."),
    "demo": ("dralet.cli.demo", "Run the whole claim lifecycle locally, no cluster needed."),
    "validate": ("dralet.cli.validate", "Check DRA manifests against schemas, rules and CEL."),
    "audit": ("dralet.cli.audit", "Report (and --fix) leaks and inconsistencies on a node."),
    "simulate": ("dralet.cli.simulate", "Dry-run the scheduler's structured allocation."),
    "conformance": ("dralet.cli.conformance", "Check any DRA driver's socket as a kubelet would."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, _ = COMMANDS[cmd_name]
        module = importlib.import_module(module_name)
        command: click.Command = module.command
        return command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(exits.INTERRUPTED)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_, text) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dralet")
def cli() -> None:
    """dralet: build and check Kubernetes DRA node drivers that cannot leak devices."""


def main() -> None:
    """Run the command line; an unexpected error is one line and exit status 2 unless
    ``--debug`` asks for the traceback."""
    try:
        cli()
    except Exception as error:  # the last resort of the command line
        if "--debug" in sys.argv[1:]:
            raise
        click.echo(f"error: {error} (run with --debug for the traceback)", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
