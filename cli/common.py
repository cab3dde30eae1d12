"""What every person-facing command shares: flags, exit codes, one-line errors, safe output.

Imports only typer and the standard library, so that `tidings --help` stays fast.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from tidings._compat import StrEnum

# Exit codes: one per failure class, stable, documented in docs/cli.md ("Errors").
EXIT_OK = 0
EXIT_ERROR = 1  # anything unexpected (an API error of another kind, a bug)
EXIT_INVALID = 2  # invalid input (also what typer/click use for usage errors)
EXIT_UNREACHABLE = 3  # no cluster configured or reachable
EXIT_FORBIDDEN = 4  # the API refused: 403 (or 401, credentials rejected)
EXIT_NOT_FOUND = 5  # the task or app does not exist (no object, no events)
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An error the user gets as one line on stderr and an exit code; never a traceback."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def invalid(message: str) -> NoReturn:
    raise CliError(f"invalid input: {message}", EXIT_INVALID)


def not_found(message: str) -> NoReturn:
    raise CliError(f"not found: {message}", EXIT_NOT_FOUND)


def _one_line(message: str) -> str:
    # Messages may quote server text; keep them to one harmless line.
    from tidings.schemas.wire.text import sanitize_text

    return " ".join(sanitize_text(message).split()) or "error"


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, no traceback, and the exit code: what every failure ends in."""
    typer.echo(f"error: {_one_line(message)}", err=True)
    raise SystemExit(code)


F = TypeVar("F", bound=Callable[..., Any])


def command(func: F) -> F:
    """Wrap a command body: known failures become one line and their exit code.

    API and connection errors are translated by the translators `tidings.cli.kube` registers
    (``add_error_translator``); anything else is a bug and still gets one line (set
    TIDINGS_DEBUG=1 for the traceback).
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CliError as err:
            fail(err.message, err.code)
        except KeyboardInterrupt:
            typer.echo("", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except (typer.Exit, SystemExit):
            raise
        except BrokenPipeError:
            # `tidings logs APP | head` closes stdout early; that is not an error.
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
            finally:
                raise SystemExit(EXIT_OK) from None
        except Exception as err:
            if os.environ.get("TIDINGS_DEBUG"):
                raise
            mapped = _map_exception(err)
            if mapped is not None:
                fail(mapped.message, mapped.code)
            fail(f"internal error: {type(err).__name__}: {err} (TIDINGS_DEBUG=1 shows more)",
                 EXIT_ERROR)

    return wrapper  # type: ignore[return-value]


# Who maps foreign exceptions to CliErrors. `tidings.cli.kube` adds its own when it is
# imported: this module stays beneath it (no import back), and a command that never loaded
# the Kubernetes layer never pays for it.
_ERROR_TRANSLATORS: list[Callable[[BaseException], CliError | None]] = []


def add_error_translator(translate: Callable[[BaseException], CliError | None]) -> None:
    """Let ``command`` map exceptions it does not know through ``translate`` (None: not
    one of the translator's)."""
    if translate not in _ERROR_TRANSLATORS:
        _ERROR_TRANSLATORS.append(translate)


def _map_exception(err: Exception) -> CliError | None:
    for translate in _ERROR_TRANSLATORS:
        mapped = translate(err)
        if mapped is not None:
            return mapped
    return None


# kubectl's global flags, which it takes before the command too (`kubectl -n ml get pods`):
# those that take a value, and those that do not.
GLOBAL_FLAGS = frozenset({"-n", "--namespace", "--kubeconfig", "--context",
                          "--request-timeout", "--as", "--as-group"})
GLOBAL_SWITCHES = frozenset({"-A", "--all-namespaces"})


def hoist_global_flags(args: Sequence[str]) -> list[str]:
    """``tidings -n ml list`` as ``tidings list -n ml``: the global flags that come before the
    command move after it (before a ``--``), in their order; the rest is left as it is."""
    args = list(args)
    lead: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if arg in GLOBAL_FLAGS and i + 1 < len(args):
            lead += args[i:i + 2]
            i += 2
        elif name in GLOBAL_FLAGS or arg in GLOBAL_SWITCHES or (
                arg[:2] == "-n" and len(arg) > 2 and not arg.startswith("--")):
            lead.append(arg)
            i += 1
        else:
            break
    rest = args[i:]
    if not lead or not rest:
        return args
    end = rest.index("--") if "--" in rest else len(rest)
    return rest[:end] + lead + rest[end:]


class TidingsGroup(TyperGroup):
    """The root command group: usage errors become one line and exit code 2 as well, and
    kubectl's global flags may come before the command."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        extra["windows_expand_args"] = windows_expand_args
        args = hoist_global_flags(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        from typer._click import exceptions as click_exc

        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click_exc.NoArgsIsHelpError as err:
            err.show()
            raise SystemExit(EXIT_INVALID) from None
        except click_exc.UsageError as err:
            where = err.ctx.command_path if err.ctx is not None else "tidings"
            fail(f"{err.format_message()} (see '{where} --help')", EXIT_INVALID)
        except click_exc.ClickException as err:
            fail(err.format_message(), err.exit_code)
        except (typer.Abort, KeyboardInterrupt):
            fail("aborted", EXIT_INTERRUPTED)
        raise SystemExit(rv if isinstance(rv, int) else EXIT_OK)


# --- flags shared by every command ---------------------------------------------------------


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


Kubeconfig = Annotated[str | None, typer.Option(
    "--kubeconfig", metavar="FILE", show_default=False,
    help="Path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")]
Context = Annotated[str | None, typer.Option(
    "--context", metavar="NAME", show_default=False,
    help="The kubeconfig context to use (default: its current-context).")]
Namespace = Annotated[str | None, typer.Option(
    "--namespace", "-n", metavar="NS", show_default=False,
    help="Namespace (default: the context's namespace, else 'default').")]
AllNamespaces = Annotated[bool, typer.Option(
    "--all-namespaces", "-A",
    help="Look in every namespace (it must be found in exactly one).")]
OutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", case_sensitive=False, help="Output format.")]
RequestTimeout = Annotated[str | None, typer.Option(
    "--request-timeout", metavar="DURATION", show_default=False,
    help="How long one API request may take, as kubectl: 30s, 1m, 1h; a bare number is "
    "seconds; 0 waits as long as the server takes (default: 5s to connect, 30s to answer).")]
AsUser = Annotated[str | None, typer.Option(
    "--as", metavar="USER", show_default=False,
    help="Impersonate this user (the context's identity needs the 'impersonate' verb).")]
AsGroup = Annotated[list[str] | None, typer.Option(
    "--as-group", metavar="GROUP", show_default=False,
    help="Impersonate this group (repeatable); with or without --as.")]


def option_group(param: str, build: Callable[..., Any],
                 options: dict[str, tuple[Any, Any]]) -> Callable[[F], F]:
    """A decorator that writes a set of flags once: the command's parameter ``param`` becomes
    the flags ``options`` (name -> (Annotated type, default)), in its place, and the command
    gets ``build(**those flags)`` as ``param``. Typer reads the new signature."""

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != param:
                params.append(p)
                continue
            params += [inspect.Parameter(name, p.kind, default=default, annotation=ann)
                       for name, (ann, default) in options.items()]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags = {name: kwargs.pop(name) for name in options if name in kwargs}
            return func(*args, **kwargs, **{param: build(**flags)})

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


@dataclass(frozen=True)
class Connection:
    """kubectl's connection flags of one command line (--kubeconfig, --context,
    --request-timeout, --as, --as-group); ``tidings.cli.kube.connect_with`` makes the client
    they mean."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: str | None = None
    as_user: str | None = None
    as_group: list[str] | None = None


# What a command's ``conn`` parameter defaults to in its own signature (the decorator below
# replaces the parameter, so typer never sees it).
DEFAULT_CONNECTION = Connection()

#: The command's ``conn: Connection`` parameter becomes the five connection flags.
connection = option_group("conn", Connection, {
    "kubeconfig": (Kubeconfig, None), "context": (Context, None),
    "request_timeout": (RequestTimeout, None), "as_user": (AsUser, None),
    "as_group": (AsGroup, None)})


def _complete_names(ctx: typer.Context, incomplete: str,
                    lists: Callable[[str], list[tuple[str, dict[str, Any], str]]]) -> list[str]:
    """Shell completion from the cluster: the names ``lists(namespace)`` yields, as (path,
    query, JSON-path-like key) per list, in the namespace the command line means. Bounded:
    one page each, short timeouts; any failure completes nothing (an error must never be
    printed into the user's prompt)."""
    try:
        from tidings.kube import connect
        from tidings.schemas.wire.names import valid_object_name

        p = ctx.params
        namespace = p.get("namespace")
        if namespace is not None:
            check_namespace(namespace)
        client = connect(p.get("kubeconfig"), p.get("context"), namespace=namespace,
                         user_agent="tidings-cli")
        names: set[str] = set()
        try:
            for path, query, key in lists(client.config.namespace):
                page = client.get(path, {**query, "limit": 200}, timeout=2.0)
                for item in page.get("items", []):
                    field, name = key.split(".")
                    value = (item.get(field) or {}).get(name) if isinstance(item, dict) else None
                    names.add(str(value or ""))
        finally:
            client.close()
        return sorted(n for n in names if n.startswith(incomplete) and valid_object_name(n))
    except Exception:
        return []


def complete_task(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of TASK: TaskFeedback names."""
    from tidings.schemas.wire.contract import taskfeedback_path

    return _complete_names(ctx, incomplete, lambda ns: [
        (taskfeedback_path(ns), {}, "metadata.name")])


def complete_app(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of APP (`lineage`, `logs`): the tasks (TaskFeedback names) and the
    subjects of PodSpawned records."""
    from tidings.schemas.wire.contract import BUS_SELECTOR, events_path, taskfeedback_path

    return _complete_names(ctx, incomplete, lambda ns: [
        (taskfeedback_path(ns), {}, "metadata.name"),
        (events_path(ns), {"fieldSelector": f"{BUS_SELECTOR},reason=PodSpawned"},
         "regarding.name")])


# --- input validation ----------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def check_name(value: str, what: str) -> str:
    """An app (or other object) name: lowercase letters, digits, '-' and '.'."""
    # App names are object names, by the schemas' rule: field selectors never see ',' or '='.
    from tidings.schemas.wire.names import valid_object_name

    if not valid_object_name(value):
        shown = _one_line(value)[:80]
        invalid(f"{what} {shown!r} is not a valid name (lowercase letters, digits, '-', '.')")
    return value


def check_task(value: str) -> str:
    """A task id, by the one rule the library, `tidings emit` and the watcher also apply."""
    from tidings.schemas.wire.names import TASK_ID_RULE, valid_task_id

    if not valid_task_id(value):
        invalid(f"task {_one_line(value)[:80]!r} is not a valid task id ({TASK_ID_RULE})")
    return value


def check_namespace(value: str) -> str:
    from tidings.schemas.wire.names import valid_namespace

    if not valid_namespace(value):
        invalid(f"namespace {_one_line(value)[:80]!r} is not a valid namespace name")
    return value


def parse_duration(value: str, what: str = "--since", *, allow_zero: bool = False) -> float:
    """'90s', '5m', '1h30m', '2d', '250ms' -> seconds (> 0, or >= 0 with allow_zero)."""
    text = value.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text or total < 0 or (total == 0 and not allow_zero):
        invalid(f"{what} {_one_line(value)[:40]!r} is not a duration like 30s, 5m, 1h30m")
    return total


def parse_request_timeout(value: str) -> float:
    """kubectl's --request-timeout: '0' (no limit), a bare number of seconds, or a duration
    ('30s', '1m', '1h30m'). Returns seconds; 0 means no limit."""
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return float(text)
    return parse_duration(text, "--request-timeout", allow_zero=True)


# --- terminal- and parser-safe output ------------------------------------------------------


def safe(value: object) -> str:
    """Any text that came from the cluster, neutralised for a terminal (defence in depth)."""
    from tidings.schemas.wire.text import sanitize_text

    return sanitize_text(value if isinstance(value, str) else str(value))


def safe_data(value: Any) -> Any:
    """A JSON-like value with every string (keys too) neutralised."""
    if isinstance(value, str):
        return safe(value)
    if isinstance(value, dict):
        return {safe(str(k)): safe_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_data(v) for v in value]
    return value


def dump(data: Any, fmt: Output) -> str:
    """json or yaml text of `data`, sanitised; pure ASCII-safe escapes for anything odd."""
    clean = safe_data(data)
    if fmt is Output.json:
        import json

        return json.dumps(clean, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    import yaml

    return yaml.safe_dump(clean, sort_keys=False, allow_unicode=True, width=1000)


def console(stderr: bool = False) -> Any:
    """A rich Console that never interprets markup or highlights cluster text. Not on a
    terminal (piped, CI logs) it does not wrap: a long URL stays one line that grep finds."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, markup=False, emoji=False, soft_wrap=False)
    if not out.is_terminal:
        out.width = UNWRAPPED_WIDTH
    return out


# Rich needs a width; this one is never reached by a real line, so nothing wraps.
UNWRAPPED_WIDTH = 100_000
