"""The framework-free part of the integrations (integrations/report.py): who reports what by
rank, metric values, tracker links, hooks that never raise. The callbacks on the real
frameworks are tested in tests/integrations."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_emitter_core import make, unpack
from tidings.integrations.report import (
    MLFLOW_PUBLIC_URL_ENV,
    RunReporter,
    guarded,
    mlflow_run_url,
    scalar,
)
from tidings.schemas.wire.payloads import LogLink, Metric, Metrics, Progress, Quiet


class Tensor:
    """The two methods scalar() reads from a torch tensor or a numpy array."""

    def __init__(self, *values: float) -> None:
        self.values = values

    def numel(self) -> int:
        return len(self.values)

    def item(self) -> float:
        assert len(self.values) == 1
        return self.values[0]


def test_scalar_takes_numbers_and_one_element_tensors_only() -> None:
    assert scalar(3) == 3.0 and scalar(0.25) == 0.25 and scalar(Tensor(1.5)) == 1.5
    # A diverging loss is reported, not dropped: NonFiniteMetrics.
    assert scalar(-math.inf) == -math.inf and math.isnan(scalar(Tensor(math.nan)) or 0.0)
    for bad in [True, Tensor(1.0, 2.0), "0.5", None, [1.0], {"a": 1}]:
        assert scalar(bad) is None, bad


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_scalar_keeps_every_float(value: float) -> None:
    out = scalar(value)
    assert out is not None and (out == value or (math.isnan(value) and math.isnan(out)))


def test_mlflow_run_page_from_the_tracking_uri_or_the_public_url(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MLFLOW_PUBLIC_URL_ENV, raising=False)
    assert (mlflow_run_url("http://127.0.0.1:5000/", "3", "ab12")
            == "http://127.0.0.1:5000/#/experiments/3/runs/ab12")
    for store in ["file:///mlruns", "sqlite:///mlflow.db", "databricks", "", None]:
        assert mlflow_run_url(store, "3", "ab12") is None  # no page to open
    assert mlflow_run_url("http://h", None, "ab12") is None
    # Ids are path segments, never path syntax.
    assert mlflow_run_url("http://h", "../x", "a/b?c") == "http://h/#/experiments/..%2Fx/runs/a%2Fb%3Fc"
    monkeypatch.setenv(MLFLOW_PUBLIC_URL_ENV, "https://mlflow.example.com/ml")
    assert (mlflow_run_url("http://mlflow.mlflow.svc:5000", "3", "ab12")
            == "https://mlflow.example.com/ml/#/experiments/3/runs/ab12")


def reporter(**ranks: int) -> tuple[RunReporter, Any, Any]:
    em, rec = make()
    r = RunReporter(em)
    r.begin(**{"global_rank": 0, "local_rank": 0, "world_size": 1, "local_world_size": 1,
               **ranks})
    return r, em, rec


def sent(em: Any, rec: Any) -> list[Any]:
    """The facts sent, a Window's parts one by one."""
    assert em.flush(5)
    return [f for p in rec.parsed() for f in unpack(p.payload)]


def metrics(payloads: list[Any]) -> list[tuple[str, float, int | None]]:
    """The Metric rows sent (one Metric, or several in one Metrics note)."""
    rows = [m for p in payloads if isinstance(p, Metrics) for m in p.metrics]
    rows += [p for p in payloads if isinstance(p, Metric)]
    return sorted((m.name, m.value, m.step) for m in rows)


def test_rank_zero_of_the_run_sends_progress_metrics_and_each_link_once() -> None:
    r, em, rec = reporter(world_size=8, local_world_size=4)  # 2 pods of 4 processes
    r.step(3, 6)
    r.metrics({"loss": Tensor(0.5), "epoch": 1, "bad": math.nan, "note": "x"}, 3)
    r.links([("wandb", None), ("mlflow", "http://127.0.0.1:5000/#/experiments/1/runs/a")])
    r.links([("mlflow", "http://127.0.0.1:5000/#/experiments/1/runs/b")])  # once per run
    r.end()
    r.end()
    payloads = sent(em, rec)
    progress = [p for p in payloads if isinstance(p, Progress)]
    assert all(p.workers == 2 for p in progress)  # the world size in pods
    assert [p for p in progress if p.final] == [progress[-1]] and progress[-1].fraction == 1.0
    assert [p.url for p in payloads if isinstance(p, LogLink)] == [
        "http://127.0.0.1:5000/#/experiments/1/runs/a"]
    assert metrics(payloads) == [("bad", math.nan, 3), ("epoch", 1.0, 3), ("loss", 0.5, 3)]


def test_other_ranks_send_progress_per_pod_and_no_run_facts() -> None:
    r, em, rec = reporter(global_rank=4, local_rank=0, world_size=8, local_world_size=4)
    r.step(3, 6)
    r.metrics({"loss": 0.5}, 3)
    r.links([("mlflow", "http://127.0.0.1:5000/#/experiments/1/runs/a")])
    payloads = sent(em, rec)
    assert payloads and all(isinstance(p, Progress) for p in payloads)

    r2, em2, rec2 = reporter(global_rank=5, local_rank=1, world_size=8, local_world_size=4)
    r2.step(3, 6)
    r2.end()
    assert sent(em2, rec2) == []  # local rank 0 speaks for the pod


def test_any_rank_reports_its_crash_keeping_the_progress() -> None:
    r, em, rec = reporter(global_rank=5, local_rank=1, world_size=8, local_world_size=4)
    em.progress(0.5)  # what this process had reported
    r.crashed(RuntimeError("NCCL timeout"))
    (final,) = [p for p in sent(em, rec) if isinstance(p, Progress) and p.final]
    assert final.failed and final.fraction == 0.5 and final.message == "RuntimeError: NCCL timeout"


def test_a_guarded_hook_never_raises_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    @guarded
    def hook(n: int) -> int:
        calls.append(n)
        raise ValueError("broken")

    with caplog.at_level(logging.DEBUG, logger="tidings.integrations"):
        assert hook(1) is None and hook(2) is None
    assert calls == [1, 2]
    assert len([r for r in caplog.records if "hook" in r.getMessage()]) == 1


def test_a_declared_worker_count_from_the_environment_wins_over_the_world_size() -> None:
    em, rec = make(workers=3)  # TIDINGS_EMIT_WORKERS=3, e.g. the Job's completions
    r = RunReporter(em)
    r.begin(global_rank=0, local_rank=0, world_size=8, local_world_size=4)
    r.end()
    assert {p.workers for p in sent(em, rec) if isinstance(p, Progress)} == {3}


# What each launcher puts in the environment of the processes it starts, one pod running two
# of them (the launchers' sources are cited in integrations/report.py).
LAUNCHERS: dict[str, dict[str, str]] = {
    "torchrun": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                 "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    # deepspeed/launcher/launch.py, and what accelerate then writes on CPU (LOCAL_WORLD_SIZE
    # from its own list, which lacks LOCAL_SIZE).
    "deepspeed": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_SIZE": "2",
                  "CROSS_RANK": "0", "CROSS_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "1"},
    "openmpi": {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "OMPI_COMM_WORLD_NODE_RANK": "1"},
    "mpich": {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
    "mvapich2": {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2",
                 "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "2"},
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_every_launcher_says_how_many_processes_the_pod_runs(
        launcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings.integrations.report import LOCAL_SIZE_ENV, local_world_size

    for name in LOCAL_SIZE_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in LAUNCHERS[launcher].items():
        monkeypatch.setenv(name, value)
    assert local_world_size(2) == 2
    # Two processes in one pod are one worker: local rank 0 reports, and it is all there is.
    em, rec = make()
    r = RunReporter(em)
    r.begin(global_rank=0, local_rank=0, world_size=2, local_world_size=local_world_size(2))
    r.end()
    assert em.flush(5)
    (final,) = [ev.payload for ev in rec.parsed()
                if isinstance(ev.payload, Progress) and ev.payload.final]
    assert final.workers == 1


def test_a_local_size_that_cannot_be_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings.integrations.report import LOCAL_SIZE_ENV, local_world_size

    for name in LOCAL_SIZE_ENV:
        monkeypatch.delenv(name, raising=False)
    assert local_world_size(8) == 1  # no launcher: one process per pod
    monkeypatch.setenv("LOCAL_SIZE", "3")  # does not divide 8 processes: not this launch's
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_world_size(8) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "many")
    assert local_world_size(8) == 1


def test_a_pod_declares_its_quiet_periods_from_local_rank_zero_only() -> None:
    """A checkpoint or an evaluation ahead: local rank 0 declares the pod quiet for
    ``quiet_s`` (one event), after the progress it reported before; other ranks say
    nothing, and ``quiet_s=0`` never declares."""
    r, em, rec = reporter(world_size=8, local_world_size=4)
    r.quiet_s = 900.0
    r.step(3, 6)
    r.quiet("checkpoint")
    r.step(3, 6)  # the checkpoint is written: the report ends the period
    payloads = sent(em, rec)
    quiet = [p for p in payloads if isinstance(p, Quiet)]
    assert quiet == [Quiet(seconds=900.0, reason="checkpoint")]
    first = payloads.index(quiet[0])
    assert any(isinstance(p, Progress) for p in payloads[:first])  # the report made before

    r2, em2, rec2 = reporter(global_rank=5, local_rank=1, world_size=8, local_world_size=4)
    r2.quiet("evaluation")
    assert sent(em2, rec2) == []
    r3, em3, rec3 = reporter()
    r3.quiet_s = 0
    r3.quiet("evaluation")
    assert not [p for p in sent(em3, rec3) if isinstance(p, Quiet)]
