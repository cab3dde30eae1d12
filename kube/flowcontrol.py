"""The one pacing kit (client-go's ``util/flowcontrol``): a token bucket and a capped
exponential backoff, pure and stdlib-only, for the emitter, the watcher and the CLI alike.

It lives in ``tidings.kube`` because that is the one layer all three already import and the
light (workload) install already ships: the emitter must not need watcher dependencies and
``schemas`` stays about the bus contract. Retries of one request (a create that got 429 or a
5xx) use tenacity in the emitter; this kit paces loops that run on (watches, status writes).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` tokens at once, refilled at ``rate`` per second. Thread-safe.

    A token is whatever the caller spends: one create (the emitter's per-pod budget), or an
    estimate of API-server seconds (the watcher's status-write budget). ``try_take`` takes
    only what is there; ``take`` reserves, like Go's ``rate.Limiter.Reserve``: it takes now,
    possibly into debt, and says how long until the debt is paid. ``take`` of a negative
    amount refunds (an estimate corrected by the real cost), never beyond the burst.
    """

    __slots__ = ("_clock", "_last", "_lock", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # A bucket must be able to hold one whole token, or nothing would ever be sent.
        self.rate = max(float(rate), 1e-9)
        self.burst = max(float(burst), 1.0)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._last:  # a clock going backwards refills nothing
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now

    @property
    def tokens(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def try_take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens if they are there."""
        with self._lock:
            self._refill()
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def take(self, n: float = 1.0) -> float:
        """Take ``n`` tokens now (into debt if need be); seconds until the balance is back
        at zero (0 when within budget)."""
        with self._lock:
            self._refill()
            self._tokens = min(self.burst, self._tokens - n)
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are there (0 when they are now; ``n=0``: until any
        debt is paid)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= n else (n - self._tokens) / self.rate


class Backoff:
    """Capped exponential backoff with jitter: the n-th failure in a row waits
    ``min(cap, base * 2**(n-1))`` stretched by up to ``jitter`` (client-go's 800 ms to 30 s).

    ``next``/``reset`` keep the count for one loop (a reflector, a CLI watch); ``delay(n)`` is
    the same rule for a caller that keeps counts itself (one per task key).
    """

    def __init__(self, base: float = 0.8, cap: float = 30.0, jitter: float = 0.5,
                 rng: Callable[[], float] = random.random) -> None:
        self.base, self.cap, self.jitter, self._rng = base, cap, jitter, rng
        self.failures = 0

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row (0 after none)."""
        if failures <= 0:
            return 0.0
        d = min(self.cap, self.base * 2.0 ** min(failures - 1, 32))
        return min(self.cap, d * (1.0 + self.jitter * self._rng())) if self.jitter else d

    def next(self) -> float:
        """Count one more failure; the seconds to wait before the next attempt."""
        self.failures = min(self.failures + 1, 33)
        return self.delay(self.failures)

    def reset(self) -> None:
        self.failures = 0
