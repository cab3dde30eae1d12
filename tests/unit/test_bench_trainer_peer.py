"""bench_trainer_peer's reading of what each object shows (pure): which logged step a
TrainJob's progress shows (it names no loss step, only its ``current_step``), and the
latency from a step's log to the first observation showing it or a later step."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
peer: Any = importlib.import_module("bench_trainer_peer")


def trainjob(step: int | None, loss: str | None, percent: int = 50) -> dict[str, Any]:
    metrics = [] if loss is None else [{"name": "loss", "value": loss}]
    if step is not None:
        metrics.append({"name": "current_step", "value": str(step)})
    return {"status": {"trainerStatus": {"progressPercentage": percent, "metrics": metrics}}}


def test_the_peer_shows_the_step_and_the_loss_it_posted() -> None:
    assert peer.peer_shown(trainjob(20, "0.5")) == (20, "0.5")
    assert peer.peer_shown(trainjob(None, "0.5")) == (None, "0.5")
    # The end of training names no step: it shows every step.
    assert peer.peer_shown(trainjob(None, "0.4", percent=100))[0] >= 2**31


def test_a_peer_loss_is_the_latest_logged_step_at_or_before_its_current_step() -> None:
    logs = [{"step": 10, "t": 100.0, "loss": 0.7}, {"step": 20, "t": 105.0, "loss": 0.6}]
    # At step 21 the object still shows step 10's loss: step 20's is not shown yet.
    seen = [(101.0, (11, "0.7")), (106.0, (21, "0.7")), (111.0, (26, "0.6"))]
    assert peer.latencies(logs, seen, peer=True) == [1.0, 6.0]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=20, unique=True),
       st.lists(st.tuples(st.floats(0, 100), st.integers(0, 60)), max_size=30))
def test_a_step_is_shown_at_the_first_observation_of_it_or_a_later_one(
        steps: list[int], observed: list[tuple[float, int]]) -> None:
    logs = [{"step": s, "t": float(s), "loss": 1.0 / s} for s in sorted(steps)]
    seen = [(t, (step, 0.1)) for t, step in sorted(observed)]
    got = peer.latencies(logs, seen, peer=False)
    expected = [next(t for t, (s, _) in seen if s >= rec["step"]) - rec["t"]
                for rec in logs if any(s >= rec["step"] for _, (s, _) in seen)]
    assert got == expected
