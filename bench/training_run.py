"""A Hugging Face Trainer run as the bus sees it, for the benches: the real ``TidingsCallback``
driven through a Trainer's hook sequence on a simulated clock, its two pods' real Emitters
sending to memory, and the status the watcher writes from those events (the real fold).

No framework is imported: ``transformers`` is replaced by a stub of the four names the
callback module imports, and the Trainer's side (its steps, logs and evaluations, in the
order ``Trainer._inner_training_loop`` calls the hooks) is written out here. Time is
simulated: the emitter's and the callback's clock (``time.time`` and ``perf_counter``) read
the run's clock, and each pod's window of coalescible facts closes every ``window_s`` of it
(a flush), so the Window events, the span lanes and the metrics' curves are those of a run of
that length. The sender's own pacing stays on the real monotonic clock.
"""

from __future__ import annotations

import importlib
import math
import random
import sys
import time
import types
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from support import KeepEvents  # bench/support.py

from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.schemas import ParsedEvent, TaskRef, fold_all, parse_event
from tidings.schemas.engine.state import TaskState

# What Trainer.log sends on_log every `logging_steps` (transformers 4.4x), at an evaluation
# (Trainer.evaluate: logged, then on_evaluate), and once at the end of train().
TRAIN_LOGS = ("loss", "grad_norm", "learning_rate", "epoch")
EVAL_LOGS = ("eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
             "epoch")
END_LOGS = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
            "total_flos", "train_loss", "epoch")
#: Every metric name a Trainer run reports (13).
HF_METRICS = tuple(dict.fromkeys(TRAIN_LOGS + EVAL_LOGS + END_LOGS))


@dataclass(frozen=True)
class Run:
    """The run's shape. ``every_metric_each_log``: each logging step logs all 13 names (as a
    run with a ``compute_metrics`` per log would), so every curve fills its points."""

    steps: int = 300
    logging_steps: int = 5
    eval_steps: int = 50
    pods: int = 2
    step_s: float = 0.5  # one optimizer step (each further pod 4 % slower)
    eval_s: float = 6.0  # one evaluation
    window_s: float = 6.0  # the emitter's window of coalescible facts (its default)
    every_metric_each_log: bool = False


class _Clock:
    """``time`` as the emitter and the callback read it: ``time()`` and ``perf_counter()``
    are the run's clock; the rest (``monotonic``, ``sleep``) the real one."""

    def __init__(self, t0: float) -> None:
        self.now = t0

    def time(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _callback_class() -> type:
    """``TidingsCallback``, imported with a stub ``transformers`` (the callback uses its four
    names as base class and annotations only)."""
    stub = types.ModuleType("transformers")
    stub.TrainerCallback = type("TrainerCallback", (), {})  # type: ignore[attr-defined]
    for name in ("TrainerControl", "TrainerState", "TrainingArguments"):
        setattr(stub, name, object)
    saved = sys.modules.get("transformers")
    sys.modules["transformers"] = stub
    try:
        module = importlib.import_module("tidings.integrations.transformers")
    finally:
        if saved is None:
            del sys.modules["transformers"]
        else:
            sys.modules["transformers"] = saved
    return module.TidingsCallback  # type: ignore[no-any-return]


def _logs(names: tuple[str, ...], step: int, run: Run, rng: random.Random) -> dict[str, float]:
    """Plausible values, with the digits a Trainer's logs have."""
    x = step / run.steps
    epoch = step / max(1, run.steps // 3)  # three epochs
    values = {
        "loss": round(2.3 * math.exp(-3 * x) + 0.2 + rng.uniform(-0.05, 0.05), 4),
        "grad_norm": 4.0 * math.exp(-2 * x) + rng.uniform(0, 0.5),
        "learning_rate": 5e-05 * (1 - x),
        "epoch": epoch,
        "eval_loss": 2.1 * math.exp(-2.5 * x) + 0.3 + rng.uniform(-0.02, 0.02),
        "eval_runtime": round(run.eval_s + rng.uniform(-0.3, 0.3), 4),
        "eval_samples_per_second": round(512 / run.eval_s + rng.uniform(-4, 4), 3),
        "eval_steps_per_second": round(64 / run.eval_s + rng.uniform(-0.5, 0.5), 3),
        "train_runtime": round(step * run.step_s, 4),
        "train_samples_per_second": round(16 / run.step_s + rng.uniform(-1, 1), 3),
        "train_steps_per_second": round(1 / run.step_s + rng.uniform(-0.05, 0.05), 3),
        "total_flos": 1.7e13 * step / run.steps * 3,
        "train_loss": 0.9 + rng.uniform(-0.05, 0.05),
    }
    return {k: values[k] for k in names}


def hf_run_events(namespace: str, task: str, run: Run, t_end: float | None = None,
                  seed: int = 7) -> list[ParsedEvent]:
    """Every event the pods of ``run`` send, parsed as the watcher parses them; the run ends
    at ``t_end`` (epoch seconds; default now)."""
    out = []
    for body in hf_run_bodies(namespace, task, run, t_end, seed):
        ev = parse_event(body)
        assert isinstance(ev, ParsedEvent), ev
        out.append(ev)
    return out


def hf_run_bodies(namespace: str, task: str, run: Run, t_end: float | None = None,
                  seed: int = 7) -> list[dict[str, Any]]:
    """Every event body the pods of ``run`` send (pod ``<task>-worker-<i>``, uid
    ``0000000<i>-5b1e-4c6f-9a7e-0123456789ab``), as the API server would store them."""
    callback_class = _callback_class()
    rng = random.Random(seed)
    evals = run.steps // run.eval_steps if run.eval_steps else 0
    duration = run.steps * run.step_s * (1 + 0.04 * (run.pods - 1)) + evals * run.eval_s
    clock = _Clock((t_end if t_end is not None else time.time()) - duration)
    importlib.import_module("tidings.emitter.sender")  # (with the modules it builds with)
    # Every module of the emitter and the callback that reads the clock, however they split.
    modules = [m for name, m in list(sys.modules.items())
               if name.startswith(("tidings.emitter.", "tidings.integrations."))
               and getattr(m, "time", None) is time]
    for m in modules:
        m.time = clock  # type: ignore[attr-defined]
    recorders = [KeepEvents() for _ in range(run.pods)]
    emitters = [Emitter(EmitterConfig(span_window_s=3600, rate=1e6, burst=1e6),
                        identity=Identity(namespace, f"{task}-worker-{i}",
                                          f"{i:08x}-5b1e-4c6f-9a7e-0123456789ab", task),
                        transport=recorders[i]) for i in range(run.pods)]
    try:
        callbacks = [callback_class(em) for em in emitters]
        args = [types.SimpleNamespace(world_size=run.pods, process_index=i,
                                      local_process_index=0) for i in range(run.pods)]
        state = types.SimpleNamespace(global_step=0, max_steps=run.steps)
        next_window = clock.now

        def each(hook: str, **kw: Any) -> None:
            for cb, a in zip(callbacks, args, strict=True):
                getattr(cb, hook)(a, state, None, **kw)

        def windows() -> None:
            nonlocal next_window
            if clock.now >= next_window:
                for em in emitters:
                    em.flush(30)
                next_window = clock.now + run.window_s

        each("on_train_begin")
        windows()
        for step in range(1, run.steps + 1):
            each("on_step_begin")
            began = clock.now
            for i, (cb, a) in enumerate(zip(callbacks, args, strict=True)):
                clock.now = began + run.step_s * (1 + 0.04 * i)
                state.global_step = step
                cb.on_step_end(a, state, None)
            if step % run.logging_steps == 0:
                names = HF_METRICS if run.every_metric_each_log else TRAIN_LOGS
                each("on_log", logs=_logs(names, step, run, rng))
            if run.eval_steps and step % run.eval_steps == 0:
                clock.now += run.eval_s
                metrics = _logs(EVAL_LOGS, step, run, rng)
                each("on_log", logs=metrics)
                each("on_evaluate", metrics=metrics)
            windows()
        each("on_log", logs=_logs(END_LOGS, run.steps, run, rng))
        each("on_train_end")
        for em in emitters:
            em.close(30)
    finally:
        for m in modules:
            m.time = time  # type: ignore[attr-defined]
    return [body for rec in recorders for body in rec.bodies]


def hf_run_state(namespace: str, task: str, run: Run, t_end: float | None = None
                 ) -> tuple[TaskState, int, datetime]:
    """The folded state of ``run``'s events, how many events there were, and when the run
    ended (the time to judge its health at)."""
    end = t_end if t_end is not None else time.time()
    events = hf_run_events(namespace, task, run, end)
    return fold_all(TaskRef(namespace, task), events), len(events), \
        datetime.fromtimestamp(end, UTC)
