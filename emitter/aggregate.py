"""Span aggregation: many spans per name fold into one summary per name and window.

``record`` runs in the workload thread: O(1) under an uncontended lock, no allocation
after a name's first span in a window. The sender ``drain``s whole windows.
"""

from __future__ import annotations

import threading

# Field positions of an aggregate list (a list, not an object: cheapest to update in place).
COUNT, TOTAL, MIN, MAX, FIRST_START, LAST_END, ERRORS = range(7)
Agg = list[float]  # [count, total_s, min_s, max_s, first_start, last_end, errors]


def merge(into: dict[str, Agg], other: dict[str, Agg], max_names: int | None = None) -> int:
    """Fold the aggregates of ``other`` into ``into`` (used for windows not yet sent).

    With ``max_names``, a name new to ``into`` once it holds that many is not added: windows
    waiting for budget keep merging, so without the bound a workload that changes its span
    names every window would grow them without end. Returns the spans so refused."""
    dropped = 0
    for name, b in other.items():
        a = into.get(name)
        if a is None:
            if max_names is not None and len(into) >= max_names:
                dropped += int(b[COUNT])
                continue
            into[name] = b
            continue
        a[COUNT] += b[COUNT]
        a[TOTAL] += b[TOTAL]
        a[MIN] = min(a[MIN], b[MIN])
        a[MAX] = max(a[MAX], b[MAX])
        a[FIRST_START] = min(a[FIRST_START], b[FIRST_START])
        a[LAST_END] = max(a[LAST_END], b[LAST_END])
        a[ERRORS] += b[ERRORS]
    return dropped


class SpanAggregator:
    __slots__ = ("_lock", "_max_names", "_window", "dropped", "recorded")

    def __init__(self, max_names: int = 256) -> None:
        self._lock = threading.Lock()
        self._window: dict[str, Agg] = {}
        self._max_names = max(1, max_names)
        self.recorded = 0  # spans accepted into some window
        self.dropped = 0  # spans refused because the window already held max_names names

    def record(self, name: str, start: float, duration: float, error: bool = False) -> bool:
        """Add one span (``start`` epoch seconds, ``duration`` seconds). False when dropped."""
        if duration < 0.0:  # a clock step must not yield negative durations
            duration = 0.0
        end = start + duration
        with self._lock:
            a = self._window.get(name)
            if a is None:
                if len(self._window) >= self._max_names:
                    self.dropped += 1
                    return False
                self._window[name] = [1, duration, duration, duration, start, end, int(error)]
                self.recorded += 1
                return True
            a[0] += 1
            a[1] += duration
            if duration < a[2]:
                a[2] = duration
            elif duration > a[3]:
                a[3] = duration
            if start < a[4]:
                a[4] = start
            if end > a[5]:
                a[5] = end
            if error:
                a[6] += 1
            self.recorded += 1
            return True

    @property
    def max_names(self) -> int:
        return self._max_names

    def drain(self) -> dict[str, Agg]:
        """Take the current window and start an empty one."""
        with self._lock:
            window, self._window = self._window, {}
        return window

    def __len__(self) -> int:
        return len(self._window)
