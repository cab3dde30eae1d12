"""The `tidings` command: one typer app; each command group lives in its own module.

Heavy imports (kubernetes, pydantic models) happen inside commands so `tidings --help`
starts fast.
"""

from __future__ import annotations

import typer

from tidings.cli import (
    dev,
    emit,
    lineage_cmd,
    list_cmd,
    state_cmd,
    task_cmd,
    timeline_cmd,
    ui_cmd,
    watcher_cmd,
)
from tidings.cli.common import TidingsGroup

app = typer.Typer(
    cls=TidingsGroup,  # usage errors are one line and exit 2, like every other CLI error
    name="tidings",
    help="A feedback bus built on Kubernetes Events.",
    no_args_is_help=True,
    # kubectl-like plain help: no rich markup, so text such as '[env TIDINGS_TASK]' is shown
    # as written (and --help never imports rich).
    rich_markup_mode=None,
    add_completion=True,  # --install-completion / --show-completion; TASK names complete
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from tidings import __version__

        typer.echo(f"tidings {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """A feedback bus built on Kubernetes Events."""


app.add_typer(dev.app, name="dev")
app.add_typer(emit.app, name="emit")
app.add_typer(watcher_cmd.app, name="watcher")
app.add_typer(task_cmd.app, name="task")
# The person-facing commands (list, state, watch, lineage, logs, timeline, ui); see
# cli/*_cmd.py.
for _commands in (list_cmd, state_cmd, lineage_cmd, timeline_cmd, ui_cmd):
    _commands.register(app)


def run() -> None:
    import os
    import sys

    # Installed as `kubectl-tidings`, kubectl runs it for `kubectl tidings ...`: say so in usage.
    plugin = os.path.basename(sys.argv[0]) == "kubectl-tidings"
    app(prog_name="kubectl tidings" if plugin else "tidings")
