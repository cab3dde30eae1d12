"""tidings.emitter: tell the bus what your task is doing, cheaply, without ever blocking it.

    from tidings import emitter as tidings

    tidings.log_link("wandb", run.url)          # critical: delivered exactly once
    tidings.progress(0.3, "epoch 3/10")         # coalesced: latest wins
    tidings.metric("loss", 0.31, step=1200)     # coalesced: latest per name per window
    with tidings.span("epoch"):                 # summed per window into SpanSummary events
        train_one_epoch()

    with tidings.quiet(600, "checkpoint"):      # silent on purpose: not Stalled meanwhile
        save_checkpoint()
    with tidings.run():                         # success at the end, or a failure naming
        main()                                  # the exception (so does any uncaught crash)

Identity comes from the service-account token's claims (the pod it is bound to), overridden
by the downward API (POD_NAME, POD_NAMESPACE, POD_UID); the task from TIDINGS_TASK, else the
watcher finds it from the pod's labels (a Job's, JobSet's, TrainJob's or Workflow's name).
With no cluster configured (no in-cluster config, no kubeconfig), calls are counted and
logged at DEBUG on the ``tidings.emitter`` logger: local runs behave, nothing raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .config import EmitterConfig, Identity
from .core import Emitter, QuietBlock, started_emitters
from .outcome import install_crash_hooks, install_sigterm_flush, report_failure
from .spans import Span
from .spans import traced as _traced

if TYPE_CHECKING:  # the payload models load on the sender thread, never at import
    from tidings.schemas.wire.payloads import Payload

__all__ = [
    "Emitter",
    "EmitterConfig",
    "Identity",
    "Span",
    "deck_ready",
    "emit",
    "fail",
    "flush",
    "get_emitter",
    "log_link",
    "metric",
    "pod_spawned",
    "progress",
    "quiet",
    "record_span",
    "run",
    "set_emitter",
    "span",
    "start_span",
    "stats",
    "traced",
]

F = TypeVar("F", bound=Callable[..., Any])

_default: Emitter | None = None
_default_lock = threading.Lock()


def get_emitter() -> Emitter:
    """The process-wide default Emitter, created on first use from the environment."""
    global _default
    em = _default
    if em is None:
        with _default_lock:
            if _default is None:
                _default = Emitter()
            em = _default
    return em


def set_emitter(emitter: Emitter | None) -> Emitter | None:
    """Replace the default Emitter (None: recreate from the environment on next use)."""
    global _default
    with _default_lock:
        old, _default = _default, emitter
    return old


def log_link(name: str, url: str) -> None:
    """Publish a named http(s) link (W&B run, dashboard, logs)."""
    (_default or get_emitter()).log_link(name, url)


def deck_ready(name: str, uri: str) -> None:
    """Announce that the report deck ``name`` is ready at ``uri``."""
    (_default or get_emitter()).deck_ready(name, uri)


def progress(fraction: float, message: str = "", final: bool = False,
             failed: bool = False) -> None:
    """Report progress 0..1; ``final=True`` marks the terminal report (never dropped);
    ``failed=True`` with it reports a failure."""
    (_default or get_emitter()).progress(fraction, message, final, failed)


def metric(name: str, value: float, *, step: int | None = None) -> None:
    """Report the latest value of a named scalar metric (loss, learning rate, eval accuracy,
    samples/s), at training ``step`` when given; coalesced per name. NaN and infinities are
    sent as such: the task's ``NonFiniteMetrics`` condition names them."""
    (_default or get_emitter()).metric(name, value, step=step)


def quiet(seconds: float, reason: str = "") -> QuietBlock:
    """Declare that this worker will be quiet on purpose for up to ``seconds`` from now (a
    checkpoint, an evaluation): not called ``Stalled`` until that period (held to the
    watcher's ``--quiet-max``, 1 h by default) and its usual allowance after it are over.
    Its next progress report ends the period. Usable as ``with quiet(600, "checkpoint"):``."""
    return (_default or get_emitter()).quiet(seconds, reason)


def fail(message: str = "", fraction: float | None = None) -> None:
    """Report that this worker failed (a failed final progress: the task's phase is Failed),
    keeping the progress made unless ``fraction`` is given."""
    (_default or get_emitter()).fail(message, fraction)


def record_span(name: str, start: float, end: float, error: bool = False) -> None:
    """Record a finished span with explicit epoch-second times."""
    (_default or get_emitter()).record_span(name, start, end, error)


def span(name: str) -> Span:
    """A span as a context manager: ``with span("epoch"): ...``."""
    return Span(_default or get_emitter(), name)


def start_span(name: str) -> Span:
    """Start a span now; call ``.end(error=False)`` on the result when it is done."""
    return Span(_default or get_emitter(), name)


@overload
def traced(name: F) -> F: ...
@overload
def traced(name: str | None = None) -> Callable[[F], F]: ...
def traced(name: Any = None) -> Any:
    """Decorator: every call of the function is a span (``@traced`` or ``@traced("load")``)."""
    if callable(name):
        return _traced(get_emitter, None, name)
    return lambda fn: _traced(get_emitter, name, fn)


def pod_spawned(pod_name: str, pod_uid: str, *, app: str, role: str = "", attempt: int = 0,
                app_kind: str = "", app_api_version: str = "", app_uid: str = "",
                namespace: str = "") -> None:
    """For controllers: record that pod ``pod_name``/``pod_uid`` was spawned for ``app``."""
    (_default or get_emitter()).pod_spawned(
        pod_name, pod_uid, app=app, role=role, attempt=attempt, app_kind=app_kind,
        app_api_version=app_api_version, app_uid=app_uid, namespace=namespace)


def emit(payload: Payload, *, warning: bool = False) -> None:
    """Send a ready-made tidings.schemas payload (critical)."""
    (_default or get_emitter()).emit(payload, warning=warning)


def flush(timeout: float = 5.0) -> bool:
    """Send everything emitted so far; True when it was all delivered within ``timeout``
    (False when anything since the previous flush was refused, invalid or dropped)."""
    return (_default or get_emitter()).flush(timeout)


def stats() -> dict[str, Any]:
    """Counters of the default Emitter (delivered, coalesced, dropped, refused, ...)."""
    return (_default or get_emitter()).stats()


@contextmanager
def run(emitter: Emitter | None = None) -> Iterator[Emitter]:
    """``with run():`` around a worker's work: a clean exit (or ``sys.exit(0)``) reports a
    successful final, an exception a failed final naming it, a non-zero ``sys.exit`` one
    with its code or message (then it propagates). Uses the default Emitter unless one is
    given."""
    em = emitter if emitter is not None else get_emitter()
    install_crash_hooks(started_emitters)
    install_sigterm_flush(started_emitters, em.config.sigterm_flush_s)
    try:
        yield em
    except SystemExit as e:
        if e.code in (None, 0):
            em.progress(1.0, "", final=True)
        else:
            report_failure(e, em)
        raise
    except BaseException as e:
        report_failure(e, em)
        raise
    else:
        em.progress(1.0, "", final=True)
