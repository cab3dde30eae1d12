"""The estimated completion time is bounded: a worker whose progress carries
an old eventTime (a skewed clock) made ``estimated_completion`` overflow past year 9999, so
every status write of its task raised and ``tidings state --from-events`` crashed. Over the
whole range of times and fractions the contract accepts, the status encodes, round-trips and
renders, and the ETA is absent or within ``ETA_HORIZON`` of the latest report."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import datetime, timedelta

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import expanded
from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings._compat import UTC
from tidings.schemas import ParsedEvent, PodRef, Progress, TaskState, fold_all
from tidings.schemas.engine.completion import ETA_HORIZON
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.wire.times import parse_time

# Every eventTime and creationTimestamp the contract accepts (RFC 3339, years 1..9999).
times = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
                     timezones=st.just(UTC))
fractions = st.floats(0.0, 1.0, allow_nan=False)


def progress(worker: int, seq: int, fraction: float, t: datetime,
             created: datetime | None = None, final: bool = False) -> ParsedEvent:
    ev = make_event(Progress(fraction=fraction, message=f"w{worker} {fraction}", final=final),
                    f"inst-{worker}", seq, t, pod=PodRef(f"w-{worker}", f"uid-{worker}"))
    return ev if created is None else replace(ev, created=created)


def render_text(state: TaskState) -> str:
    """What `tidings state` prints for the state (the CLI's renderer, to a string)."""
    from rich.console import Console

    from tidings.cli.snapshot import SOURCE_EVENTS, Snapshot
    from tidings.cli.taskrender import one_line, render

    out = io.StringIO()
    Console(file=out, width=120).print(render(Snapshot(state, SOURCE_EVENTS)))
    return out.getvalue() + one_line(Snapshot(state, SOURCE_EVENTS))


def test_an_old_event_time_gives_no_eta_and_every_write_still_happens() -> None:
    """The issue's run: w-0's clock is decades behind; its pace would end after year 9999.
    The task's status still encodes (w-1's facts show), without an ETA."""
    skewed = datetime(1971, 1, 1, tzinfo=UTC)
    evs = [progress(0, 0, 0.0, skewed, created=T0), progress(0, 1, 0.0001, T0, created=T0),
           progress(1, 0, 0.2, T0, created=T0), progress(1, 1, 0.6, T0 + timedelta(seconds=9),
                                                        created=T0 + timedelta(seconds=9))]
    s = fold_all(TASK, evs)
    assert s.progress is not None and s.progress.eta is None
    st_ = to_status(s, budget=STATUS_BUDGET)
    assert "estimatedCompletionTime" not in st_["progress"]
    assert [w["fraction"] for w in expanded(st_)["workers"]] == [0.0001, 0.6]
    assert decode_status(TASK, orjson.loads(orjson.dumps(st_))) == s
    assert "w1 0.6" in render_text(s)


def test_an_eta_within_the_horizon_is_kept() -> None:
    # 0.1 done in 10 days, 0.9 to go: 90 days ahead, well within a year.
    day = timedelta(days=1)
    s = fold_all(TASK, [progress(0, 0, 0.0, T0), progress(0, 1, 0.1, T0 + 10 * day)])
    assert s.progress is not None and s.progress.eta == T0 + 100 * day
    # 0.01 in 10 days: 990 days ahead, beyond it.
    slow = fold_all(TASK, [progress(0, 0, 0.0, T0), progress(0, 1, 0.01, T0 + 10 * day)])
    assert slow.progress is not None and slow.progress.eta is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), fractions, times, st.none() | times,
                          st.booleans()), min_size=1, max_size=8))
def test_no_accepted_time_or_fraction_stops_a_write_or_a_reader(
        reports: list[tuple[int, float, datetime, datetime | None, bool]]) -> None:
    evs = [progress(w, seq, f, t, created, final and f == 1.0)
           for seq, (w, f, t, created, final) in enumerate(reports)]
    s = fold_all(TASK, evs)
    assert s.counters.get("fold_errors", 0) == 0
    status = to_status(s, budget=STATUS_BUDGET)  # what the watcher writes: it must not raise
    data = orjson.loads(orjson.dumps(status))
    eta = data.get("progress", {}).get("estimatedCompletionTime")
    if eta is not None:
        t = parse_time(eta)
        latest = max(w.at[0] for w in s.workers.values() if not w.final)
        assert t is not None and latest - timedelta(seconds=1) <= t <= latest + ETA_HORIZON
    assert decode_status(TASK, data) == s
    render_text(s)  # what `tidings state --from-events` prints
