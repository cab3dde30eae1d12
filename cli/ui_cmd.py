"""`tidings ui`: serve the live web page of the tasks (tidings.ui) on a local address, with
the user's own kubeconfig and flags, as `kubectl proxy` does: the user's RBAC applies and
nothing new is granted."""

from __future__ import annotations

from typing import Annotated

import typer

from tidings.cli.common import (
    DEFAULT_CONNECTION,
    EXIT_ERROR,
    EXIT_INVALID,
    CliError,
    Connection,
    command,
    connection,
    invalid,
    safe,
)

# What the ui extra brings; a missing one means "install the extra", not a bug.
_UI_DEPENDENCIES = {"starlette", "uvicorn", "sse_starlette", "jinja2", "markupsafe", "anyio",
                    "h11"}
DEFAULT_PORT = 8765


@command
@connection
def ui(
    address: Annotated[str, typer.Option(
        "--address", metavar="ADDRESS",
        help="The address to listen on. Anything but a loopback address lets whoever "
        "reaches it read the cluster with your credentials.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        "--port", min=0, max=65535, metavar="PORT",
        help="The port to listen on (0: any free port).")] = DEFAULT_PORT,
    no_browser: Annotated[bool, typer.Option(
        "--no-browser", help="Do not open the page in a browser.")] = False,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", metavar="NS", show_default=False,
        help="Only this namespace (default: every namespace you may list; when every one "
        "is refused, the context's namespace).")] = None,
    all_namespaces: Annotated[bool, typer.Option(
        "--all-namespaces", "-A", help="Show the tasks of every namespace (the default "
        "without -n).")] = False,
    selector: Annotated[str | None, typer.Option(
        "--selector", "-l", metavar="SELECTOR", show_default=False,
        help="Only tasks with these labels, kubectl's (app=train,team!=ml).")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option(
        "--allowed-host", metavar="NAME", show_default=False,
        help="Another name requests may give this server in their Host header (repeatable), "
        "beside the loopback names, the address served (on 0.0.0.0 or ::, the address a "
        "request reached) and, off loopback, this host's names; any other is refused (DNS "
        "rebinding).")] = None,
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Serve a live web page of the tasks (read-only, with your own credentials)."""
    import sys

    if namespace is not None and all_namespaces:
        invalid("-n and --all-namespaces cannot be used together")
    try:
        from tidings.ui.guard import host_of, is_loopback
        from tidings.ui.server import Settings, Ui, listen, serve
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in _UI_DEPENDENCIES:
            raise
        raise CliError(f"tidings ui needs the ui extra ({e.name} is missing): "
                       "pip install 'tidings[ui]'", EXIT_ERROR) from None
    extra_hosts = tuple(allowed_host or ())
    for name in extra_hosts:
        if host_of(name) is None or name.strip() in ("", "*"):
            invalid(f"--allowed-host {safe(name)!r} is not a host name or address")
    from tidings import __version__
    from tidings.cli.kube import connect_with
    from tidings.ui.hub import Hub

    k = connect_with(conn, namespace)
    try:
        sock = listen(address, port)
    except OSError as err:
        raise CliError(f"cannot listen on {safe(address)}:{port}: {err.strerror or err}"
                       + (" (choose another --port)" if port else ""), EXIT_INVALID) from None
    host, bound = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    if not is_loopback(address):
        typer.echo(f"warning: serving on {safe(address)}, not a loopback address: anyone who "
                   "can reach it reads the cluster with your credentials (requests must name "
                   "it by the address they reach, this host's names or --allowed-host)", err=True)
    hub = Hub(k, namespace, selector, fallback=None if namespace else k.namespace)
    where = k.client.config.source or k.server
    app = Ui(k, hub, Settings(address, where, __version__, extra_hosts)).app()
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    typer.echo(f"tidings ui: serving {url} ({scope}, {safe(where)}); Ctrl-C stops")
    sys.stdout.flush()
    if not no_browser:
        import webbrowser

        if not webbrowser.open(url):
            typer.echo(f"(no browser found: open {url} yourself)", err=True)
    try:
        serve(app, sock)
    finally:
        sock.close()
        k.close()


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Tasks")(ui)
