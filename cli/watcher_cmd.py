"""`tidings watcher run`: fold the bus's Events into TaskFeedback status (see tidings.watcher)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated, Any, get_type_hints

import typer

from tidings.cli.common import option_group
from tidings.schemas.status.health import THRESHOLDS
from tidings.watcher.logs import LogFormat, LogLevel
from tidings.watcher.settings import Options, flag_names, options

app = typer.Typer(help="The watcher: fold bus events into durable TaskFeedback state.",
                  no_args_is_help=True, rich_markup_mode=None)

# What `run`'s ``opts`` defaults to in its own signature (option_group replaces it).
DEFAULT_OPTIONS = Options()



def _flags() -> dict[str, tuple[Any, Any]]:
    """The flags of `watcher run`, one per setting declared with a help text: how to connect
    first, then what the controller runs with (the health conditions' thresholds in place of
    ``health``), then serving and leader election."""
    hints = get_type_hints(Options)
    out: dict[str, tuple[Any, Any]] = {}
    first = ("kubeconfig", "context")
    for f in sorted(fields(Options), key=lambda f: f.name not in first):
        meta = f.metadata
        if f.name == "health":
            for t in THRESHOLDS.values():
                out[t.name] = (Annotated[int if t.integer else float, typer.Option(
                    t.flag, envvar=t.env, help=t.help)], t.default)
        if not meta.get("help"):
            continue
        default = None if f.default is MISSING else f.default  # a list: none given
        out[f.name] = (Annotated[hints[f.name], typer.Option(
            *flag_names(f.name), envvar=meta["env"], help=meta["help"],
            show_default=default not in (None, ""))], default)
    return out


@app.command()
@option_group("opts", options, _flags())
def run(
    opts: Options = DEFAULT_OPTIONS,
    log_level: Annotated[LogLevel, typer.Option(
        envvar="TIDINGS_LOG_LEVEL", case_sensitive=False,
        help="Least severe level logged.")] = LogLevel.info,
    log_format: Annotated[LogFormat, typer.Option(
        envvar="TIDINGS_LOG_FORMAT", case_sensitive=False,
        help="text, or json: one object per line (time, level, logger, message and fields "
        "such as namespace, task, reason), status lines on stdout included.")] = LogFormat.text,
) -> None:
    """Watch bus events and keep one TaskFeedback status per task up to date."""
    from tidings.watcher.app import ConfigError
    from tidings.watcher.app import run as run_watcher
    from tidings.watcher.logs import announcer, configure

    configure(log_level, log_format)
    try:
        code = run_watcher(opts, announce=announcer(log_format))
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except ValueError as e:  # e.g. inconsistent lease timings
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


@app.callback()
def _group() -> None:
    """The watcher."""
