"""The emitter's quiet periods (``tidings.emitter.quiet``): one Quiet event per declaration,
sent at once and after any progress still pending (a report sent after it would end the
period it declares); a period out of range is counted as invalid and never sent."""

from __future__ import annotations

import math

import pytest

from tests.support import eventually
from tests.unit.test_emitter_core import make
from tidings import emitter
from tidings.schemas.wire.payloads import Progress, Quiet, Window


def test_a_quiet_period_is_one_event_sent_at_once_and_usable_as_a_block() -> None:
    em, rec = make(span_window_s=3600.0)
    with em.quiet(600, "checkpoint") as block:
        assert block is not None
        eventually(lambda: len(rec.bodies) == 1, 5, "the declaration sent at once")
    assert em.flush(5)
    parsed = rec.parsed()
    assert [type(p.payload) for p in parsed] == [Quiet]
    assert parsed[0].payload == Quiet(seconds=600.0, reason="checkpoint")
    assert em.stats()["api_calls"] == 1  # (nothing at the block's end)


def test_a_pending_progress_goes_out_before_the_quiet_period() -> None:
    """A report made before the declaration, still held for its window, would end the
    period if it were created after it: it leaves first."""
    em, rec = make(span_window_s=3600.0)
    em.progress(0.1, "started")
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window sent at once")
    em.progress(0.4, "step 40/100")  # the window is open: it waits for it
    em.quiet(300, "evaluation")
    assert em.flush(5)
    parsed = rec.parsed()
    kinds = [type(p.payload) for p in parsed]
    assert kinds == [Window, Window, Quiet], kinds
    progress = parsed[1].payload.progress  # type: ignore[union-attr]
    assert isinstance(progress, Progress) and progress.fraction == 0.4
    assert [p.seq for p in parsed] == sorted(p.seq for p in parsed)


@pytest.mark.parametrize("seconds", [0, -5, 86_401, math.inf, math.nan, "soon", None])
def test_a_period_out_of_range_is_counted_as_invalid_and_not_sent(seconds: object) -> None:
    em, rec = make(span_window_s=3600.0)
    em.quiet(seconds, "x")  # type: ignore[arg-type]
    assert not em.flush(5)
    assert em.stats()["invalid"] == 1
    assert rec.bodies == []


def test_the_module_function_uses_the_default_emitter() -> None:
    em, rec = make(span_window_s=3600.0)
    old = emitter.set_emitter(em)
    try:
        with emitter.quiet(120, "checkpoint"):
            pass
        assert emitter.flush(5)
    finally:
        emitter.set_emitter(old)
    assert [type(p.payload) for p in rec.parsed()] == [Quiet]


@pytest.mark.parametrize("seconds", ["0", "-5", "86401", "nan", "inf"])
def test_tidings_emit_quiet_refuses_a_period_out_of_range(seconds: str) -> None:
    from typer.testing import CliRunner

    from tidings.cli.main import app

    res = CliRunner().invoke(app, ["emit", "quiet", "--", seconds, "checkpoint"])
    assert res.exit_code == 2 and "invalid Quiet" in res.stderr, res.output
