"""`tidings dev up|down|status`: the local control plane for the demo and for hacking.

Only these commands ship; the control plane itself (tools/devcluster.py) is in the checkout,
never in the wheel: workload and watcher images do not carry it. Without a checkout the
commands say so in one line (exit 5).
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tidings.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NOT_FOUND, fail

app = typer.Typer(help="Run a local control plane (etcd, kube-apiserver, kwok, "
                  "kube-controller-manager) on 127.0.0.1.",
                  no_args_is_help=True, rich_markup_mode=None)

StateDir = Annotated[Path | None, typer.Option("--state-dir", help="Where the control plane keeps "
                     "its data, logs and kubeconfigs (default: $TIDINGS_DEV_DIR or "
                     "~/.local/state/tidings/dev).")]


def devcluster() -> Any:
    """The checkout's tools.devcluster module: of the checkout tidings was installed from
    (`pip install -e .`), else of the current directory. Exits 5 in one line without one."""
    loaded = sys.modules.get("tools.devcluster")
    if loaded is not None:
        return loaded
    import tidings

    for root in (Path(tidings.__file__).resolve().parents[1], Path.cwd()):
        if (root / "tools" / "devcluster.py").is_file():
            sys.path.insert(0, str(root))
            return importlib.import_module("tools.devcluster")
    fail("the local control plane is not installed with tidings: run `tidings dev` from a "
         "tidings checkout (git clone, then `make setup`)", EXIT_NOT_FOUND)


@app.command()
def up(
    state_dir: StateDir = None,
    port: Annotated[int, typer.Option(help="kube-apiserver port (0 picks a free one).")] = 0,
    controllers: Annotated[bool, typer.Option(
        "--controllers/--no-controllers",
        help="Run kube-controller-manager with the Job controller, the garbage collector, "
             "ClusterRole aggregation, node lifecycle and taint eviction (a lost node's pods "
             "are evicted) (on by default; --no-controllers saves its CPU).")] = True,
    real_node: Annotated[bool, typer.Option(
        "--real-node",
        help="Also run a real node: a kubelet and containerd whose pods run as containers "
             "(the images of `make images`), kube-proxy and a scheduler, in a network "
             "namespace of its own; needs root and `make node images`.")] = False,
) -> None:
    """Start the control plane and print `export` lines for eval."""
    dc = devcluster()
    folder = state_dir or dc.default_state_dir()
    try:
        existing = dc.ControlPlane.load(folder)
        if existing.running():
            typer.echo(f"# already running in {folder}", err=True)
            _print_exports(existing.env())
            return
        existing.stop()
    except dc.ControlPlaneError:
        pass
    try:
        running = ("etcd, kube-apiserver, kwok and kube-controller-manager (Jobs, garbage "
                   "collection, node lifecycle and eviction)" if controllers
                   else "etcd, kube-apiserver and kwok")
        if real_node:
            running += " and a real node (kubelet, containerd, kube-proxy, kube-scheduler)"
        typer.echo(f"# starting {running} in {folder} ...", err=True)
        cp = dc.ControlPlane(state_dir=folder, apiserver_port=port,
                             controllers=dc.DEFAULT_CONTROLLERS if controllers else (),
                             real_node=real_node,
                             say=lambda line: typer.echo(f"# {line}", err=True)).start()
    except dc.BinariesMissing as err:
        fail(str(err), EXIT_NOT_FOUND)
    except dc.ControlPlaneError as err:
        fail(str(err), EXIT_ERROR)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    if cp.node is not None:
        typer.echo(f"# node {cp.node.name} runs pods as containers: a pod that names no node "
                   f"is scheduled there; images: {', '.join(cp.node.image_names())}", err=True)
    typer.echo(f"# ready: {cp.server} (run `tidings dev down` to stop)", err=True)
    _print_exports(cp.env())


def _print_exports(env: dict[str, str]) -> None:
    for key, value in env.items():
        typer.echo(f"export {key}={shlex.quote(value)}")


@app.command()
def down(state_dir: StateDir = None) -> None:
    """Stop the control plane started by `tidings dev up`."""
    dc = devcluster()
    folder = state_dir or dc.default_state_dir()
    try:
        cp = dc.ControlPlane.load(folder)
    except dc.ControlPlaneError as err:
        typer.echo(f"# {err}; nothing to stop", err=True)
        return
    cp.stop()
    typer.echo(f"# stopped the control plane in {folder}", err=True)


@app.command()
def status(state_dir: StateDir = None) -> None:
    """Say whether the control plane is running, and where."""
    dc = devcluster()
    folder = state_dir or dc.default_state_dir()
    try:
        cp = dc.ControlPlane.load(folder)
    except dc.ControlPlaneError as err:
        fail(str(err), EXIT_ERROR)
    if not cp.running():
        fail(f"control plane in {folder} is not running", EXIT_ERROR)
    typer.echo(f"running: {cp.server} (KUBECONFIG={cp.kubeconfig('admin')})")
    if cp.node is not None:
        typer.echo(f"real node: {cp.node.name} ({cp.node.node_ip}, network namespace "
                   f"{cp.node.netns})")
    sys.stdout.flush()
