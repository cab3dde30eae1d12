"""The `tidings` command: one typer app; each command group lives in its own module.

Heavy imports (kubernetes, pydantic models) happen inside commands so `tidings --help`
starts fast.
"""

from __future__ import annotations

import typer

from tidings.cli import dev

app = typer.Typer(
    name="tidings",
    help="A feedback bus built on Kubernetes Events.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(dev.app, name="dev")


def run() -> None:
    app()
