"""`tidings emit ...`: one fact from a shell workload, delivered before the command returns.

Exit codes: 0 delivered, 2 invalid input, 3 not delivered (unreachable, timed out, no
cluster), 4 forbidden. Errors are one line on stderr. Heavy imports wait for the command.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click import Command
from typer._click.types import ParamType
from typer.core import TyperGroup

from tidings._compat import UTC, fromisoformat
from tidings.cli.common import EXIT_FORBIDDEN, EXIT_INVALID, Context, option_group
from tidings.cli.common import EXIT_UNREACHABLE as EXIT_UNDELIVERED
from tidings.cli.common import fail as _fail  # `fail` is also a command here

if TYPE_CHECKING:
    from tidings.schemas.wire.kinds import Kind


class EmitGroup(TyperGroup):
    """`tidings emit`: the hand-written sub-commands, after those of the named kinds, which
    are built from the kind registry on first use: `tidings --help` loads this module for
    the group's one line and must not import the registry's payload models (pydantic)."""

    _commands: MutableMapping[str, Command]
    _named = False

    @property  # (click reads and writes ``commands`` directly: lazy for both)
    def commands(self) -> MutableMapping[str, Command]:
        if not self._named:
            self._named = True
            self._commands = {**_named_commands(), **self._commands}
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, Command]) -> None:
        self._commands = value


app = typer.Typer(
    cls=EmitGroup,
    help="Emit one fact about the current task (the pod from its service-account token; the "
         "downward-API environment and flags override it). Exits 0 only once the event is "
         "delivered.",
    no_args_is_help=True,
    rich_markup_mode=None,  # help text is plain: '[env X]' is never markup
)

Task = Annotated[str, typer.Option(
    "--task", envvar="TIDINGS_TASK", show_default=False,
    help="Task id (without it: a fact about this pod, folded into the task its platform "
         "labels name).")]
PodName = Annotated[str, typer.Option(
    "--pod-name", envvar="POD_NAME", show_default=False,
    help="This pod's name (default: the pod the service-account token is bound to).")]
PodUid = Annotated[str, typer.Option(
    "--pod-uid", envvar="POD_UID", show_default=False,
    help="This pod's uid (default: the pod the service-account token is bound to).")]
Namespace = Annotated[str, typer.Option(
    "--namespace", "-n", envvar="POD_NAMESPACE", show_default=False,
    help="The task's namespace (without it or its env var: the kubeconfig context's).")]
Kubeconfig = Annotated[str | None, typer.Option(
    "--kubeconfig", show_default=False,
    help="Kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config).")]
Timeout = Annotated[float, typer.Option("--timeout", min=0.0,
                                        help="Seconds to wait for delivery.")]


@dataclass(frozen=True)
class Delivery:
    """Who sends (the token's pod; the downward-API env and flags override it), to which
    cluster, and how long to wait for the event to be delivered."""

    task: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    namespace: str = ""
    kubeconfig: str | None = None
    context: str | None = None
    timeout: float = 15.0


# Each command's ``to: Delivery`` parameter becomes these flags (written once for all).
DEFAULT_DELIVERY = Delivery()
delivery = option_group("to", Delivery, {
    "task": (Task, ""), "pod_name": (PodName, ""), "pod_uid": (PodUid, ""),
    "namespace": (Namespace, ""), "kubeconfig": (Kubeconfig, None),
    "context": (Context, None), "timeout": (Timeout, 15.0)})


def _parse_time(value: str, flag: str) -> float:
    """Epoch seconds, or RFC 3339 (a time without an offset is UTC)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        t = fromisoformat(value.strip())
    except ValueError:
        _fail(f"{flag} {value!r} is neither epoch seconds nor an RFC 3339 time", EXIT_INVALID)
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _check(model: Any, **fields: Any) -> None:
    """Validate the payload here, so bad input is exit 2 and not a silent drop."""
    from pydantic import ValidationError

    from tidings.schemas.wire.constants import INSTANCE_LIMIT, SEQ_MAX
    from tidings.schemas.wire.note import NoteTooLarge, encode_note_bytes
    from tidings.schemas.wire.rejection import describe_validation_error

    try:
        payload = model(**fields)
    except ValidationError as e:
        _fail(f"invalid {model.TYPE}: {describe_validation_error(e)}", EXIT_INVALID)
    try:  # with the longest envelope there can be: what fits here fits in any event
        encode_note_bytes(payload, instance="i" * INSTANCE_LIMIT, seq=SEQ_MAX)
    except NoteTooLarge as e:
        _fail(f"invalid {model.TYPE}: {e}", EXIT_INVALID)


def _deliver(send: Callable[[Any], None], to: Delivery) -> None:
    from tidings.emitter import Emitter, EmitterConfig, Identity
    from tidings.emitter.transport import (
        FIELD_MANAGER,
        POOL_SIZE,
        KubeTransport,
        no_cluster_configured,
        sender_proof_setting,
    )
    from tidings.kube import ConfigError, connect
    from tidings.schemas.wire.names import task_id_error

    kubeconfig, context, timeout = to.kubeconfig, to.context, to.timeout
    if kubeconfig is None and context is None and no_cluster_configured():
        from tidings.kube.config import no_kubeconfig_reason

        _fail(f"no cluster configured: {no_kubeconfig_reason()}", EXIT_UNDELIVERED)
    try:
        client = connect(kubeconfig, context, maxsize=POOL_SIZE, user_agent=FIELD_MANAGER)
    except ConfigError as e:
        _fail(f"cannot load cluster config: {e}", EXIT_UNDELIVERED)
    config = EmitterConfig.from_env()
    transport = KubeTransport(client, (config.connect_timeout_s, config.read_timeout_s),
                              pod_bound=sender_proof_setting())
    # The pre-created TaskFeedback's uid only ever comes from the pod's environment; what
    # the flags and env leave unset about the pod, its token's claims say.
    identity = Identity(namespace=to.namespace, pod_name=to.pod_name,
                        pod_uid=to.pod_uid, task=to.task,
                        task_uid=os.environ.get("TIDINGS_TASK_UID", "").strip(),
                        ).completed_by(transport.bound_pod)
    if not identity.namespace:
        identity = Identity(client.namespace, identity.pod_name, identity.pod_uid,
                            identity.task, identity.task_uid)
    # Without a task id the fact is about the pod, and its labels name the task: only the
    # pod itself (its own bound token) speaks that way; acting for a pod, name the task.
    missing = identity.missing(need_task=not identity.bound_to(transport.bound_pod))
    if missing:
        flags = {"POD_NAMESPACE": "-n/--namespace", "POD_NAME": "--pod-name",
                 "POD_UID": "--pod-uid", "TIDINGS_TASK": "--task"}
        _fail("missing identity: " + ", ".join(f"{flags[m]} (or {m})" for m in missing)
              + " (not needed with the pod's own bound token)", EXIT_INVALID)
    bad_task = task_id_error(to.task) if to.task else None
    if bad_task is not None:
        _fail(f"invalid input: {bad_task}", EXIT_INVALID)
    emitter = Emitter(config, identity=identity, transport=transport)
    # The library logs for long-running workloads; here the exit code and one line speak.
    logger = logging.getLogger("tidings.emitter")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        send(emitter)
        delivered = emitter.flush(timeout)
        emitter.close(0)
    finally:
        logger.setLevel(level)
    stats = emitter.stats()
    if stats["invalid"]:
        _fail("invalid input: the event could not be built", EXIT_INVALID)
    statuses = stats["refused_by_status"]
    if statuses:
        error = stats["last_error"]
        if 401 in statuses or 403 in statuses:
            _fail(f"forbidden: {error}", EXIT_FORBIDDEN)
        if 400 in statuses or 422 in statuses:
            _fail(f"rejected by the API server: {error}", EXIT_INVALID)
        _fail(f"not delivered: {error}", EXIT_UNDELIVERED)
    if not delivered or stats["delivered"] < 1:
        _fail(f"not delivered within {timeout:g}s: {stats['last_error'] or 'timed out'}",
              EXIT_UNDELIVERED)


class Number(ParamType):
    """A float that says "number" when it is none (click's own says "not a valid float"),
    with nan and the infinities among the numbers, as Python's float() reads them."""

    name = "number"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number (nan, inf and -inf are)", param, ctx)


def _value_param(name: str, type_: str, help_: str, *, flag: bool, optional: bool = False,
                 minimum: int | None = None) -> inspect.Parameter:
    """One field of a named kind as typer reads it: an argument, or a flag ``--name``."""
    py: Any = {"str": str, "float": float, "int": int}[type_]
    number = Number() if type_ == "float" else None
    if optional:
        info: Any = typer.Option(f"--{name}", min=minimum, show_default=False, help=help_,
                                 click_type=number)
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[py | None, info])
    info = (typer.Option(f"--{name}", min=minimum, help=help_, click_type=number) if flag
            else typer.Argument(min=minimum, help=help_, click_type=number))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[py, info])


def _named_command(commands: typer.Typer, kind: Kind) -> None:
    """`tidings emit <kind.command>`: one fact of a named kind, its arguments and flags read
    from the kind's entry in the registry (its key, then its value fields)."""
    model, method = kind.models[0], kind.command.replace("-", "_")
    params = [_value_param(kind.key, "str", kind.key_help, flag=not kind.arguments)]
    params += [_value_param(f.attr, f.type, f.help, flag=not kind.arguments,
                            optional=f.optional, minimum=f.minimum) for f in kind.values]
    params.append(inspect.Parameter("to", inspect.Parameter.KEYWORD_ONLY,
                                    default=DEFAULT_DELIVERY, annotation=Delivery))

    def command(*, to: Delivery, **fields: Any) -> None:
        _check(model, **fields)
        _deliver(lambda em: getattr(em, method)(**fields), to)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__name__ = method
    # A negative VALUE (-0.5) is no option: arguments take what follows them as it is.
    settings = {"ignore_unknown_options": True} if kind.arguments else None
    commands.command(kind.command, help=kind.command_help, context_settings=settings)(
        delivery(command))


def _named_commands() -> dict[str, Command]:
    """The sub-commands of the named kinds that have one, in the registry's order."""
    from typer.main import get_command_from_info

    from tidings.schemas.wire.kinds import NAMED_KINDS

    commands = typer.Typer()
    for kind in NAMED_KINDS:
        if kind.command:
            _named_command(commands, kind)
    return {info.name or "": get_command_from_info(info, pretty_exceptions_short=True,
                                                   rich_markup_mode=None)
            for info in commands.registered_commands}


@app.command("progress")
@delivery
def progress(
    fraction: Annotated[float, typer.Argument(help="Done so far, 0..1.")],
    message: Annotated[str, typer.Option("--message", "-m", help="A short status.")] = "",
    final: Annotated[bool, typer.Option("--final", help="The terminal report.")] = False,
    to: Delivery = DEFAULT_DELIVERY,
) -> None:
    """Report progress."""
    from tidings.schemas.wire.payloads import Progress

    _check(Progress, fraction=fraction, message=message, final=final)
    _deliver(lambda em: em.progress(fraction, message, final), to)


@app.command("quiet")
@delivery
def quiet(
    seconds: Annotated[float, typer.Argument(
        help="How long this worker will be silent on purpose (more than 0, at most a day; "
             "the watcher holds it to its --quiet-max).")],
    reason: Annotated[str, typer.Argument(help="Why: checkpoint, evaluation, ...")] = "",
    to: Delivery = DEFAULT_DELIVERY,
) -> None:
    """Declare a quiet period (a checkpoint, an evaluation): the task's Stalled condition
    waits for its end; this worker's next progress report ends it."""
    from tidings.schemas.wire.payloads import Quiet

    _check(Quiet, seconds=seconds, reason=reason)
    _deliver(lambda em: em.quiet(seconds, reason), to)


@app.command("fail")
@delivery
def fail(
    message: Annotated[str, typer.Option("--message", "-m", help="What went wrong.")] = "",
    fraction: Annotated[float, typer.Option("--fraction", help="Done so far, 0..1.")] = 0.0,
    to: Delivery = DEFAULT_DELIVERY,
) -> None:
    """Report that this worker failed (a failed final progress; the task's phase: Failed)."""
    from tidings.schemas.wire.payloads import Progress

    _check(Progress, fraction=fraction, message=message, final=True, failed=True)
    _deliver(lambda em: em.fail(message, fraction), to)


@app.command("span")
@delivery
def span(
    name: Annotated[str, typer.Argument(help="Span name, e.g. download.")],
    start: Annotated[str, typer.Option("--start", help="Epoch seconds or RFC 3339.")],
    end: Annotated[str, typer.Option("--end", help="Epoch seconds or RFC 3339.")],
    error: Annotated[bool, typer.Option("--error", help="The span failed.")] = False,
    to: Delivery = DEFAULT_DELIVERY,
) -> None:
    """Report one finished span (sent as a SpanSummary of count 1)."""
    from tidings.schemas.wire.payloads import SpanSummary

    t0, t1 = _parse_time(start, "--start"), _parse_time(end, "--end")
    if t1 < t0:
        _fail("--end is before --start", EXIT_INVALID)
    _check(SpanSummary, name=name, count=1, total_s=t1 - t0, min_s=t1 - t0, max_s=t1 - t0,
           first_start=t0, last_end=t1, errors=int(error))
    _deliver(lambda em: em.record_span(name, t0, t1, error), to)
