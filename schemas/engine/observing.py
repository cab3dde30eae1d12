"""The fold of observations: what the objects of a task's pods and of the platform object
that owns it say (schemas/engine/observed.py reads them: how a pod ended, why it waits, the
platform's outcome), merged into the task's state beside the facts (``observe``).

Each observation is a join, and what it decides is read from the joined state, so
observations commute with each other and with the events (schemas/engine/folding.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from ..wire.caps import insert_capped, no_events
from ..wire.times import epoch
from .observed import Observed, PlatformOutcome, PodVerdict
from .roster import PodEnd, insert_life_end, pod_hash, uid_print, with_ends
from .state import TaskState, with_counter


def observe(state: TaskState, pods: Iterable[PodVerdict] = (), *,
            waiting: Iterable[PodVerdict] | None = None,
            platform: PlatformOutcome | None = None,
            running: tuple[int, datetime | None] | None = None) -> TaskState:
    """Merge what the task's pods' objects and its platform's object say
    (schemas/engine/observed.py) into ``state``. Pure and total like ``fold``; idempotent, and
    order-insensitive among observations and with the facts: each is a join, and what it
    decides is read from the joined state (a pod's own final, whenever it arrives, decides
    over its pod's end: ``Roster.end_of``).

    - ``pods``: pods that ended (a Waiting verdict is ignored here). Each pod's end joins the
      one known (``PodVerdict.order``: explained over merely gone, then the later): in the
      roster for every pod (the ``roster`` cap of smallest hashes, as its marks) and in
      detail for the ``observed_pods`` smallest names.
    - ``waiting``: the task's pods waiting now, one complete view (None: unchanged); it
      replaces the one kept, less pods that have ended, the ``waiting`` smallest names, and
      counts the rest (``Observed.waiting_more``; ends seen without a view leave that count
      as it is: the next view counts again).
    - ``platform``: the outcome of the platform object owning the task, joined with the one
      known (terminal over running, then the later).
    - ``running``: how many of the task's pods run now and the earliest of their starts, one
      complete view (None: unchanged); kept only while the task has no fact (it is what
      makes a silent task Running; once a pod spoke, its reports say more).

    Returns ``state`` itself when nothing changed."""
    try:
        return _observe(state, pods, waiting, platform, running)
    except Exception:  # totality, as in fold: the counter makes the bug visible
        return with_counter(state, "fold_errors")


def _observe(state: TaskState, pods: Iterable[PodVerdict], waiting: Iterable[PodVerdict] | None,
             platform: PlatformOutcome | None,
             running: tuple[int, datetime | None] | None) -> TaskState:
    lim, r, o = state.limits, state.roster, state.observed
    ends: dict[int, PodEnd] | None = None
    others: dict[int, Mapping[int, PodEnd]] = {}
    top: list[int] = []  # (the ends' hashes as a heap, once the cap is reached)
    detail: dict[str, PodVerdict] | None = None
    for v in pods:
        if not v.terminal:
            continue
        h = pod_hash(v.pod)
        end = PodEnd(v.explained, epoch(v.at), v.failed, uid_print(v.uid))
        known = (r.ends if ends is None else ends).get(h)
        if known is not None and known.uid != end.uid:  # (another life's end: its own)
            known = (r.other_ends if ends is None else others).get(h, {}).get(end.uid)
        if known is None or end > known:
            if ends is None:
                ends, others = dict(r.ends), dict(r.other_ends)
            insert_life_end(ends, others, h, end, lim.roster, r.lives.get(h), top)
        kept = (o.pods if detail is None else detail).get(v.pod)
        if kept is None or v.order() > kept.order():
            if detail is None:
                detail = dict(o.pods)
            if kept is None:
                insert_capped(detail, v.pod, v, lim.observed_pods, no_events)
            else:
                detail[v.pod] = v
    ended = r.ends if ends is None else ends
    now_waiting, more = o.waiting, o.waiting_more
    if waiting is not None:
        view: dict[str, PodVerdict] = {}
        for v in waiting:
            kept = view.get(v.pod)
            if not v.terminal and (kept is None or v.order() > kept.order()):
                view[v.pod] = v
        if ended:
            view = {p: v for p, v in view.items() if pod_hash(p) not in ended}
        now_waiting = dict(sorted(view.items())[:lim.waiting])
        more = len(view) - len(now_waiting)
    elif ends is not None:
        now_waiting = {p: v for p, v in now_waiting.items() if pod_hash(p) not in ended}
    if now_waiting == o.waiting:
        now_waiting = o.waiting
    now_platform = o.platform
    if platform is not None and (now_platform is None
                                 or platform.order() > now_platform.order()):
        now_platform = platform
    now_running = (o.running, o.running_since) if running is None else \
        (max(0, running[0]), running[1] if running[0] > 0 else None)
    if state.counters.get("events_applied", 0):
        now_running = (0, None)
    if ends is None and detail is None and now_waiting is o.waiting \
            and more == o.waiting_more and now_platform is o.platform \
            and now_running == (o.running, o.running_since):
        return state
    return replace(state, roster=r if ends is None else with_ends(
        r._replace(other_ends=others), ends),
                   observed=Observed(o.pods if detail is None else detail, now_waiting,
                                     now_platform, *now_running, more))
