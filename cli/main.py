"""The `tidings` command: one typer app; each command group lives in its own module, loaded
when its command runs.

A command line pays only for the command it runs: the root group knows every command by
name and imports a command's module (and has typer build its parameters) on first use.
`tidings --help` lists them all, so it loads them all.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib import import_module
from typing import Any

import typer
from typer._click import Command

from tidings.cli.common import TidingsGroup

# Every command of the root, in the order `tidings --help` lists them: its module under
# tidings.cli, which either has `register(app)` (commands added to the root) or is a
# command group of its own (`app`, a typer.Typer).
COMMANDS: dict[str, str] = {
    "list": "list_cmd",
    "get": "list_cmd",
    "state": "state_cmd",
    "describe": "state_cmd",
    "watch": "state_cmd",
    "lineage": "lineage_cmd",
    "logs": "lineage_cmd",
    "timeline": "timeline_cmd",
    "ui": "ui_cmd",
    "dev": "dev",
    "emit": "emit",
    "watcher": "watcher_cmd",
    "task": "task_cmd",
}

# kubectl-like plain help: no rich markup, so text such as '[env TIDINGS_TASK]' is shown as
# written (and --help never imports rich). The lazily built commands get it too.
MARKUP = None


def load_command(name: str) -> Command:
    """The click command ``name`` of the root, built from its module as typer would have
    built it inside the whole tree."""
    from typer.main import get_command_from_info, get_command_name, get_group_from_info
    from typer.models import TyperInfo

    module = import_module(f"tidings.cli.{COMMANDS[name]}")
    register = getattr(module, "register", None)
    if register is None:  # a group of its own
        return get_group_from_info(TyperInfo(module.app, name=name),
                                   pretty_exceptions_short=True, rich_markup_mode=MARKUP,
                                   suggest_commands=True)
    commands = typer.Typer()
    register(commands)
    for info in commands.registered_commands:
        # (typer names a command by its function when it is not given a name)
        if (info.name or get_command_name(info.callback.__name__)) == name:  # type: ignore[union-attr]
            return get_command_from_info(info, pretty_exceptions_short=True,
                                         rich_markup_mode=MARKUP)
    raise LookupError(f"tidings.cli.{COMMANDS[name]} registers no command {name!r}")


class LazyCommands(MutableMapping[str, Command]):
    """The root's commands by name: every name of COMMANDS, each built on first access."""

    def __init__(self) -> None:
        self.built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            if name not in COMMANDS:
                raise KeyError(name)
            self.built[name] = load_command(name)
        return self.built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the root's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self.built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self.built)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self.built


class RootGroup(TidingsGroup):
    """The root: its commands are built when a command line (or --help) asks for them."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        lazy = LazyCommands()
        lazy.built.update(self.commands)
        self.commands = lazy


app = typer.Typer(
    cls=RootGroup,  # usage errors are one line and exit 2, like every other CLI error
    name="tidings",
    help="A feedback bus built on Kubernetes Events.",
    no_args_is_help=True,
    rich_markup_mode=MARKUP,
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


def run() -> None:
    import os
    import sys

    # Installed as `kubectl-tidings`, kubectl runs it for `kubectl tidings ...`: say so in usage.
    plugin = os.path.basename(sys.argv[0]) == "kubectl-tidings"
    app(prog_name="kubectl tidings" if plugin else "tidings")
