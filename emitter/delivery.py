"""Delivering one built Event: the POST through the transport, retried by ``retry.py``
(critical facts until the exit deadline, coalescible ones a few times), every outcome counted
once; a refusal logged once with what fixes it, when that is known (a ServiceAccount without
its RoleBinding gets the exact command).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any

import tenacity

from .counters import Problems
from .retry import FirstTryFast, SendError, make_retrying

if TYPE_CHECKING:
    from .transport import Transport

log = logging.getLogger("tidings.emitter")

# Who the API server says the sender is, in a 403's message.
_SERVICE_ACCOUNT = re.compile(r'"system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)"')


def refusal_fix(e: SendError) -> str:
    """What fixes a refusal, when we know: a workload's ServiceAccount without its RoleBinding
    (403 on events) gets the exact command that binds it."""
    if e.status != 403:
        return ""
    found = _SERVICE_ACCOUNT.search(str(e))
    if found is None:
        return ("; the sender needs the ClusterRole tidings-workload bound in its namespace "
                "(kubectl create rolebinding ... --clusterrole=tidings-workload)")
    ns, sa = found.groups()
    return (f"; bind its ServiceAccount to tidings-workload: kubectl -n {ns} create rolebinding "
            f"{sa}-tidings-workload --clusterrole=tidings-workload --serviceaccount={ns}:{sa}")


class Delivery:
    """Posts built events through ``transport`` (used on the sender thread only)."""

    def __init__(self, transport: Transport, problems: Problems, abandon: threading.Event,
                 *, coalescible_attempts: int, retry_initial_s: float,
                 retry_max_s: float) -> None:
        self.transport = transport
        self.problems = problems
        self._abandon = abandon  # the exit deadline passed: stop retrying
        self._initial, self._maximum = retry_initial_s, retry_max_s
        self._critical = self._retrying(None)
        self._coalescible = self._retrying(max(1, int(coalescible_attempts)))

    def _retrying(self, attempts: int | None) -> FirstTryFast:
        counters = self.problems.counters

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            counters.retry(str(exc))
            if isinstance(exc, SendError) and exc.status == 0 \
                    and self.problems.first("unreachable"):
                log.warning("tidings: the API server %s does not answer (%s); retrying in the "
                            "background", getattr(self.transport, "server", "?"), exc)

        return make_retrying(abandoned=self._abandon.is_set, sleep=self._abandon.wait,
                             max_attempts=attempts, initial=self._initial,
                             maximum=self._maximum, before_sleep=before_sleep)

    def deliver(self, ns: str, body: dict[str, Any], *, critical: bool) -> bool:
        """Post the event until it is delivered (True), refused or given up (False)."""
        transport = self.transport
        counters = self.problems.counters

        def attempt() -> bool:
            if not transport.sink:
                counters.api_call()
            return transport.post(ns, body)

        retrying = self._critical if critical else self._coalescible
        try:
            created = retrying(attempt)
        except SendError as e:
            if e.retryable:  # abandoned at exit, or a coalescible send out of attempts
                counters.give_up(str(e))
                return False
            counters.refuse(e.status, str(e))
            if self.problems.first((e.status, e.reason)):
                log.warning("tidings: event refused, not retried (%s)%s; similar refusals are "
                            "counted silently", e, refusal_fix(e))
            return False
        except Exception as e:  # a bug in a transport must not kill the sender
            self.problems.note("undelivered", ("internal", type(e).__name__),
                               "tidings: send failed: %s: %s", type(e).__name__, e)
            return False
        counters.deliver(body.get("reason", ""), sunk=transport.sink, created=created)
        return True
