"""`tidings watcher run`: fold the bus's Events into TaskFeedback status (see tidings.watcher)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from tidings.watcher.logs import LogFormat, LogLevel

app = typer.Typer(help="The watcher: fold bus events into durable TaskFeedback state.",
                  no_args_is_help=True, rich_markup_mode=None)



def _namespaces(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [n.strip() for n in v.split(",") if n.strip()]
    return sorted(set(out))


@app.command()
def run(
    kubeconfig: Annotated[str | None, typer.Option(envvar="KUBECONFIG",
                          help="Kubeconfig file (default: in-cluster service account).")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    namespace: Annotated[list[str] | None, typer.Option(
        "--namespace", "-n", envvar="TIDINGS_WATCH_NAMESPACES",
        help="Namespace to watch (repeatable or comma-separated; default: all).")] = None,
    concurrency: Annotated[int, typer.Option(envvar="TIDINGS_CONCURRENCY",
                           help="Fold workers and write workers (tasks in parallel).")] = 8,
    metrics_host: Annotated[str, typer.Option(envvar="TIDINGS_METRICS_HOST",
                            help="Address for /metrics, /healthz, /readyz, /tasks.")] = "0.0.0.0",
    metrics_port: Annotated[int, typer.Option(envvar="TIDINGS_METRICS_PORT",
                            help="Port for the HTTP endpoints (0 picks a free one).")] = 8080,
    lease_namespace: Annotated[str | None, typer.Option(
        envvar="TIDINGS_LEASE_NAMESPACE",
        help="Namespace of the leader Lease (default: $POD_NAMESPACE or default).")] = None,
    lease_name: Annotated[str, typer.Option(envvar="TIDINGS_LEASE_NAME")] = "tidings-watcher",
    lease_duration: Annotated[float, typer.Option(envvar="TIDINGS_LEASE_DURATION",
                              help="Seconds a lease is valid without renewal.")] = 15.0,
    renew_deadline: Annotated[float | None, typer.Option(
        help="Seconds the leader keeps trying to renew (default: 2/3 lease).")] = None,
    retry_period: Annotated[float | None, typer.Option(
        help="Seconds between lease attempts (default: 2/15 lease).")] = None,
    write_interval: Annotated[float, typer.Option(
        envvar="TIDINGS_WRITE_INTERVAL",
        help="Minimum seconds between status writes of one task with a critical change "
        "(a link, a deck, a final or failed report, a phase change).")] = 0.5,
    coalesce_interval: Annotated[float, typer.Option(
        envvar="TIDINGS_COALESCE_INTERVAL",
        help="Minimum seconds between status writes of one task whose changes are only "
        "spans and non-final progress (merged meanwhile).")] = 5.0,
    write_budget: Annotated[float, typer.Option(
        envvar="TIDINGS_WRITE_BUDGET",
        help="API-server CPU (cores) the status writes may use, estimated from each "
        "write's size; critical changes go first (0: unlimited).")] = 0.5,
    max_write_rate: Annotated[float, typer.Option(
        envvar="TIDINGS_MAX_WRITE_RATE",
        help="Status writes/s over all tasks, on top of the budget (0: unlimited).")] = 0.0,
    write_policy: Annotated[str, typer.Option(
        envvar="TIDINGS_WRITE_POLICY",
        help="priority (critical changes first, then the oldest), or fifo (one line: the "
        "order before, for comparison).")] = "priority",
    watch_timeout: Annotated[int, typer.Option(help="Server-side watch timeout (s).")] = 60,
    evict_after: Annotated[float, typer.Option(
        envvar="TIDINGS_EVICT_AFTER",
        help="Drop a task from memory after this many idle seconds once its state is written "
        "(it is reloaded from its status on its next event; 0: never).")] = 7200.0,
    compact_after: Annotated[float, typer.Option(
        envvar="TIDINGS_COMPACT_AFTER", min=0.0,
        help="Keep a task compact (its compressed status, rebuilt on its next event) after "
        "this many idle seconds once its state is written (0: never).")] = 60.0,
    ttl_after_finished: Annotated[float, typer.Option(
        envvar="TIDINGS_TTL_AFTER_FINISHED", min=0.0,
        help="Delete a finished TaskFeedback that nobody owns (no ownerReferences) and its "
        "bus events this many seconds after its last fact (0: never).")] = 0.0,
    clock_skew: Annotated[float, typer.Option(
        envvar="TIDINGS_CLOCK_SKEW",
        help="Seconds an event's eventTime may be ahead of the API server's creationTimestamp "
        "for ordering; later times are clamped and counted.")] = 60.0,
    event_ttl: Annotated[float, typer.Option(
        envvar="TIDINGS_EVENT_TTL",
        help="The API server's --event-ttl in seconds: dedup entries of instances whose events "
        "were created more than this (plus 10 min) before the newest are compacted.")] = 3600.0,
    max_instances: Annotated[int, typer.Option(
        envvar="TIDINGS_MAX_INSTANCES",
        help="Emitter instances kept per task for dedup; beyond it the oldest are compacted "
        "and later events created before them skipped (counted).")] = 512,
    task_label_keys: Annotated[str | None, typer.Option(
        envvar="TIDINGS_TASK_LABEL_KEYS", show_default=False,
        help="Pod label keys that name a sender's task, comma-separated, most specific "
        "first (the first key a pod carries wins). Default: tidings.dev/task,"
        "trainer.kubeflow.org/trainjob-name,training.kubeflow.org/job-name,"
        "jobset.sigs.k8s.io/jobset-name,workflows.argoproj.io/workflow,"
        "batch.kubernetes.io/job-name.")] = None,
    leader_elect: Annotated[bool, typer.Option("--leader-elect/--no-leader-elect",
                            help="Run as one of several replicas behind a Lease.")] = True,
    identity: Annotated[str | None, typer.Option(help="Lease holder identity.")] = None,
    log_level: Annotated[LogLevel, typer.Option(
        envvar="TIDINGS_LOG_LEVEL", case_sensitive=False,
        help="Least severe level logged.")] = LogLevel.info,
    log_format: Annotated[LogFormat, typer.Option(
        envvar="TIDINGS_LOG_FORMAT", case_sensitive=False,
        help="text, or json: one object per line (time, level, logger, message and fields "
        "such as namespace, task, reason), status lines on stdout included.")] = LogFormat.text,
) -> None:
    """Watch bus events and keep one TaskFeedback status per task up to date."""
    from tidings.schemas.platform import DEFAULT_TASK_KEYS
    from tidings.watcher.app import ConfigError, Options
    from tidings.watcher.app import run as run_watcher
    from tidings.watcher.logs import announcer, configure

    configure(log_level, log_format)
    opts = Options(
        kubeconfig=kubeconfig, context=context, namespaces=_namespaces(namespace),
        concurrency=concurrency, metrics_host=metrics_host, metrics_port=metrics_port,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace or os.environ.get("POD_NAMESPACE") or "default",
        lease_name=lease_name, lease_duration=lease_duration, renew_deadline=renew_deadline,
        retry_period=retry_period, write_interval=write_interval,
        coalesce_interval=coalesce_interval, write_budget=write_budget,
        max_write_rate=max_write_rate, write_policy=write_policy,
        watch_timeout=watch_timeout, evict_after=evict_after, compact_after=compact_after,
        clock_skew=clock_skew,
        event_ttl=event_ttl, max_instances=max_instances,
        identity=identity, ttl_after_finished=ttl_after_finished,
        task_label_keys=task_label_keys or ",".join(DEFAULT_TASK_KEYS))
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
