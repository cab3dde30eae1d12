"""The bounded lookup of a stuck pod's kubelet Events: none before the grace, an answer kept
for its ttl, and lookups that find nothing spaced ever further apart (an image pull that
takes minutes costs a handful, not one every ttl)."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from tidings._compat import UTC
from tidings.watcher import kubelet_events
from tidings.watcher.kubelet_events import FIRST_WAIT, MAX_WAIT, KubeletEvents


class Events:
    """Answers the Events list as the API server would, counting the calls."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.calls = 0

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.calls += 1
        return {"items": self.items}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(kubelet_events.time, "monotonic", lambda: now[0])
    return now


def test_no_lookup_before_the_grace_then_one_that_names_the_reason(clock: list[float]) -> None:
    api = Events()
    ev = KubeletEvents(api)  # type: ignore[arg-type]
    just = datetime.now(UTC)
    assert ev.why("ns", "p", "u", just) is None and api.calls == 0
    api.items = [{"reason": "FailedMount", "type": "Warning",
                  "note": 'configmap "missing" not found',
                  "eventTime": (just - timedelta(seconds=1)).isoformat()}]
    v = ev.why("ns", "p", "u", just - timedelta(seconds=ev.grace + 0.1))
    assert v is not None and v.reason == "FailedMount" and "missing" in v.message
    assert api.calls == 1
    clock[0] += ev.ttl - 0.1
    assert ev.why("ns", "p", "u", just - timedelta(seconds=60)) == v and api.calls == 1
    clock[0] += 0.2
    ev.why("ns", "p", "u", just - timedelta(seconds=60))
    assert api.calls == 2  # an answer is read again after its ttl: the reason may change


def test_lookups_that_find_nothing_back_off_to_once_a_minute(clock: list[float]) -> None:
    api = Events()
    ev = KubeletEvents(api)  # type: ignore[arg-type]
    since = datetime.now(UTC) - timedelta(hours=1)
    at: list[float] = []
    start = clock[0]
    while clock[0] - start < 300:
        before = api.calls
        ev.why("ns", "p", "u", since)
        if api.calls > before:
            at.append(clock[0] - start)
        clock[0] += 0.5
    waits = [b - a for a, b in pairwise(at)]
    assert waits[0] == pytest.approx(FIRST_WAIT, abs=0.5)
    assert all(b >= a for a, b in pairwise(waits))
    assert max(waits) == pytest.approx(MAX_WAIT, abs=0.5)
    assert len([t for t in at if t < 60]) <= 4 and len(at) <= 8, at
