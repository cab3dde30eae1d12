"""`tidings dev up|down|status`: the local control plane for the demo and for hacking."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from tidings.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NOT_FOUND, fail

app = typer.Typer(help="Run a local control plane (etcd, kube-apiserver, kwok) on 127.0.0.1.",
                  no_args_is_help=True, rich_markup_mode=None)

StateDir = Annotated[Path | None, typer.Option("--state-dir", help="Where the control plane keeps "
                     "its data, logs and kubeconfigs (default: $TIDINGS_DEV_DIR or "
                     "~/.local/state/tidings/dev).")]


@app.command()
def up(
    state_dir: StateDir = None,
    port: Annotated[int, typer.Option(help="kube-apiserver port (0 picks a free one).")] = 0,
) -> None:
    """Start the control plane and print `export` lines for eval."""
    from tidings.cli.devcluster import (
        BinariesMissing,
        ControlPlane,
        ControlPlaneError,
        default_state_dir,
    )

    folder = state_dir or default_state_dir()
    try:
        existing = ControlPlane.load(folder)
        if existing.running():
            typer.echo(f"# already running in {folder}", err=True)
            _print_exports(existing.env())
            return
        existing.stop()
    except ControlPlaneError:
        pass
    try:
        typer.echo(f"# starting etcd, kube-apiserver and kwok in {folder} ...", err=True)
        cp = ControlPlane(state_dir=folder, apiserver_port=port).start()
    except BinariesMissing as err:
        fail(str(err), EXIT_NOT_FOUND)
    except ControlPlaneError as err:
        fail(str(err), EXIT_ERROR)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    typer.echo(f"# ready: {cp.server} (run `tidings dev down` to stop)", err=True)
    _print_exports(cp.env())


def _print_exports(env: dict[str, str]) -> None:
    for key, value in env.items():
        typer.echo(f"export {key}={shlex.quote(value)}")


@app.command()
def down(state_dir: StateDir = None) -> None:
    """Stop the control plane started by `tidings dev up`."""
    from tidings.cli.devcluster import ControlPlane, ControlPlaneError, default_state_dir

    folder = state_dir or default_state_dir()
    try:
        cp = ControlPlane.load(folder)
    except ControlPlaneError as err:
        typer.echo(f"# {err}; nothing to stop", err=True)
        return
    cp.stop()
    typer.echo(f"# stopped the control plane in {folder}", err=True)


@app.command()
def status(state_dir: StateDir = None) -> None:
    """Say whether the control plane is running, and where."""
    from tidings.cli.devcluster import ControlPlane, ControlPlaneError, default_state_dir

    folder = state_dir or default_state_dir()
    try:
        cp = ControlPlane.load(folder)
    except ControlPlaneError as err:
        fail(str(err), EXIT_ERROR)
    if not cp.running():
        fail(f"control plane in {folder} is not running", EXIT_ERROR)
    typer.echo(f"running: {cp.server} (KUBECONFIG={cp.kubeconfig('admin')})")
    sys.stdout.flush()
