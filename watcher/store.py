"""In-memory task states and their pending (not yet folded) events, keyed by task.

Seeded at start from the TaskFeedback statuses (version vectors included), so a restarted or
newly elected watcher resumes exactly where the last written state left off. Each task also
keeps the resourceVersion its state builds on and the events folded since, so that a status
write refused as stale can be rebased on whatever the object holds now. Idle, fully
written tasks are first *compacted* (kept as the zlib-compressed JSON of their full
status, rebuilt losslessly by ``decode_status`` on their next use: about a quarter
of the live objects' size), then, after longer, evicted; an evicted task comes back
unseeded, and is seeded again from its status before its next fold.

What the task's pods' objects and its platform object say (``observing.observe``) is folded
through ``observe``; the entry keeps the last such view, so a state rebuilt on another base (a
rebase) has it again before it is written.

A state belongs to one TaskFeedback object, by uid: when the object is found replaced (a
re-run deleted and re-created it) or gone, the state starts again from that object's status
(or empty) instead of moving onto it, and the old uid is remembered as stale. A TaskFeedback
the TTL deleted leaves its emitter instances behind (``bury``), so a late fact of that run is
refused instead of re-creating the object. Refused events are counted per task by reason
(``refuse``) only for tasks held here; a task name with nothing accepted gets no entry.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from tidings.schemas.engine.folding import fold_checked
from tidings.schemas.engine.observed import PlatformOutcome, PodVerdict
from tidings.schemas.engine.observing import observe
from tidings.schemas.engine.state import DEFAULT_LIMITS, Limits, TaskState, new_state
from tidings.schemas.engine.version_vector import VersionVector
from tidings.schemas.status.decoder import NOTHING_UNREAD, Unread, decode_status, read_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.event import ObjectRef, ParsedEvent, TaskRef
from tidings.schemas.wire.rejection import RejectReason


@dataclass(slots=True)
class Entry:
    # None while compacted (``packed`` then holds it, see ``Store.compact_idle``), and while
    # nothing was folded or loaded: an entry that only buffers events until their sender
    # check costs no state (a flood of refused names must not build thousands).
    state: TaskState | None
    pending: list[ParsedEvent] = field(default_factory=list)
    version: int = 0  # bumped by every fold that changed the state
    written: int = -1  # version last persisted (-1: never)
    # resourceVersion of the TaskFeedback our state builds on (read, or our last write):
    # the precondition of the next status write. None: the object is not known to exist.
    rv: str | None = None
    # Events folded since that object version, tagged with the version that folded them:
    # re-applied on top of a newer status written by someone else (see ``rebase``).
    unsaved: list[tuple[int, ParsedEvent]] = field(default_factory=list)
    # The state came from the persisted status (or the object is known to be absent); an
    # unseeded entry must be seeded before it is folded, or its fold would start from zero.
    seeded: bool = False
    touched: float = field(default_factory=time.monotonic)
    packed: bytes | None = None  # zlib(orjson(to_status(state))) of a compacted entry
    # uid of the TaskFeedback the state belongs to (None: no object known yet).
    uid: str | None = None
    # uids known not to be this task's object (deleted or replaced runs), so their events
    # are refused without another read; bounded (``MAX_STALE_UIDS``).
    stale_uids: dict[str, None] = field(default_factory=dict)
    # Emitter instances of a run whose TaskFeedback the TTL deleted: their facts are late.
    buried: frozenset[str] = frozenset()
    # Events refused for this task, by reason (persisted as status.refused).
    refused: dict[str, int] = field(default_factory=dict)
    # What the object's status held that could not be read: written back as it was (a
    # partial read is never written over; see schemas/status/decoder.py's ``Unread``).
    unread: Unread = NOTHING_UNREAD
    # The version the health clock asked to be written (its state did not change, the
    # time did): a rebase finding the status equal to our state must still write it.
    judge: int = -1
    # The last observations folded (``Store.observe``), re-applied to a rebuilt state.
    observed: Observations | None = None
    # The controller that owns the TaskFeedback (its ownerReference), when one does.
    owner: Owner | None = None
    # This term has checked the state's reporting pods for deletes it did not see.
    pods_checked: bool = False


@dataclass(frozen=True, slots=True)
class Observations:
    """What the objects said of a task (``observing.observe``'s inputs): pods that ended, the
    pods waiting now, the platform object's outcome."""

    ended: tuple[PodVerdict, ...] = ()
    waiting: tuple[PodVerdict, ...] = ()
    platform: PlatformOutcome | None = None
    running: tuple[int, datetime | None] = (0, None)

    def __bool__(self) -> bool:
        return bool(self.ended or self.waiting or self.platform or self.running[0])

    def apply(self, state: TaskState) -> TaskState:
        return observe(state, self.ended, waiting=self.waiting, platform=self.platform,
                       running=self.running)


# A TaskFeedback's controller, from its ownerReference.
Owner = ObjectRef

# Stale uids remembered per task: one re-read each beyond that, nothing worse.
MAX_STALE_UIDS = 16
# Tasks evicted from memory, remembered (names only) so that a pod of one that ends later
# brings it back; beyond, the oldest is forgotten.
MAX_EVICTED = 100_000
# The reasons counted in status.refused (the sender check's, and the object checks'): the
# only ones known to concern a task (a parse rejection may name any task at all).
REFUSAL_REASONS: tuple[RejectReason, ...] = (
    RejectReason.SPOOFED_SENDER, RejectReason.UNVERIFIED_LINEAGE,
    RejectReason.OTHER_OBJECT, RejectReason.DELETED_TASK, RejectReason.UNVERIFIED_OWNER)
_REFUSED_KEYS = {r.value: "".join(p if i == 0 else p.title()
                                  for i, p in enumerate(r.value.split("_")))
                 for r in REFUSAL_REASONS}
_REFUSED_REASONS = {v: k for k, v in _REFUSED_KEYS.items()}


def refused_status(counts: dict[str, int]) -> dict[str, int]:
    """``status.refused``: the counts by reason, camelCase keys, zero counts left out."""
    return {_REFUSED_KEYS[r]: n for r, n in sorted(counts.items())
            if n and r in _REFUSED_KEYS}


def refused_of(status: object) -> dict[str, int]:
    """The refusal counts a persisted ``.status`` holds (tolerant: anything odd is none)."""
    raw = status.get("refused") if isinstance(status, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {_REFUSED_REASONS[k]: v for k, v in raw.items()
            if k in _REFUSED_REASONS and type(v) is int and 0 < v < 2**63}


def _remember_stale(e: Entry, uid: str | None) -> None:
    if uid:
        e.stale_uids[uid] = None
        while len(e.stale_uids) > MAX_STALE_UIDS:
            del e.stale_uids[next(iter(e.stale_uids))]


# zlib level 1: compacting 100k tasks must not cost a CPU-minute; level 6 saves ~10 % more.
_ZLIB_LEVEL = 1


def pack_state(state: TaskState) -> bytes:
    """The compact form of a state: its full (unbudgeted) status, as compressed JSON."""
    return zlib.compress(orjson.dumps(to_status(state)), _ZLIB_LEVEL)


def unpack_state(task: TaskRef, packed: bytes, limits: Limits) -> TaskState:
    return decode_status(task, orjson.loads(zlib.decompress(packed)), limits)


class Store:
    """Thread-safe map TaskRef -> Entry. The fold itself runs outside the lock, in a worker."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS,
                 on_saved: Callable[[list[ParsedEvent]], None] | None = None) -> None:
        self.limits = limits
        # Told (outside the lock) which unsaved events a status now holds, once each: the
        # emit-to-status latency is observed there.
        self.on_saved = on_saved
        self._lock = threading.Lock()
        self._entries: dict[TaskRef, Entry] = {}
        self._evicted: OrderedDict[TaskRef, None] = OrderedDict()
        self.compacted = 0  # entries held compact now
        self.not_compactable = 0  # states whose status did not rebuild them exactly (kept hot)
        # Lists in progress by namespace (None: all): their tasks' folds wait (``hold``).
        self._listing: dict[str | None, int] = {}
        self._waiting: set[TaskRef] = set()  # tasks whose fold waits for the lists' end
        self._listed: set[TaskRef] = set()  # tasks whose next fold holds a list's events

    def _entry(self, task: TaskRef) -> Entry:
        e = self._entries.get(task)
        if e is None:
            e = self._entries[task] = Entry(None)
        return e

    def _hot(self, task: TaskRef, e: Entry) -> TaskState:
        """The entry's state, rebuilt from its compact form first if it has one."""
        if e.packed is not None:
            e.state = unpack_state(task, e.packed, self.limits)
            e.packed = None
            self.compacted -= 1
        elif e.state is None:
            e.state = new_state(task, self.limits)
        return e.state

    def load(self, task: TaskRef, status: object, exists: bool = True,
             rv: str | None = None, uid: str | None = None, owner: Owner | None = None
             ) -> TaskState:
        """Seed ``task`` from a persisted ``.status`` of the object ``uid`` (owned by the
        controller ``owner``) read at resourceVersion ``rv`` (or, with ``exists=False``, as
        new), entry by entry."""
        state, unread = read_status(task, status, self.limits)
        with self._lock:
            self._evicted.pop(task, None)
            e = self._entry(task)
            e.unread = unread if exists else NOTHING_UNREAD
            e.observed, e.owner, e.pods_checked = None, owner if exists else None, False
            if e.packed is not None:
                e.packed = None
                self.compacted -= 1
            if e.uid is not None and e.uid != (uid if exists else None):
                _remember_stale(e, e.uid)
            e.state, e.written, e.seeded = state, e.version, True
            e.rv, e.unsaved = (rv if exists else None), []
            e.uid = (uid or None) if exists else None
            e.refused = refused_of(status) if exists else {}
            e.touched = time.monotonic()
        return state

    def owner(self, task: TaskRef) -> Owner | None:
        """The controller owning the task's TaskFeedback, when one does."""
        with self._lock:
            e = self._entries.get(task)
            return None if e is None else e.owner

    def holds(self, task: TaskRef) -> bool:
        """The task is in memory, or was and was evicted (an observation brings it back)."""
        with self._lock:
            return task in self._entries or task in self._evicted

    def evicted(self, task: TaskRef) -> bool:
        with self._lock:
            return task in self._evicted and task not in self._entries

    def observe(self, task: TaskRef, seen: Observations, check_pods: bool = False,
                create: bool = False) -> tuple[TaskState, TaskState] | None:
        """Fold what the objects say (``seen``, the current view) into ``task``'s state, if
        it holds facts or its TaskFeedback exists (an observation alone never creates one,
        unless ``create``: the task is tracked, and exists before it speaks); (before,
        after) when that changed the state, or it is a tracked task never written yet.
        ``check_pods``: this is the term's check of the reporting pods (``pods_checked``
        from now on)."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or not e.seeded:
                return None
            # An object of this task that was deleted (by the TTL, or found gone or replaced)
            # is a decision: its objects alone never make it again, only a new fact does.
            create = create and not e.stale_uids and not e.buried
            # A tracked task with no object yet is written once, whatever it holds, so that
            # it is seen (Pending) before any of its pods speaks.
            first = create and e.uid is None and e.rv is None and e.version == 0
            if not first and (seen or None) == e.observed and (e.pods_checked or not check_pods):
                # Nothing new seen (most folds): the state has it already, since the facts
                # folded meanwhile never change what a view adds to it.
                return None
            if check_pods:
                e.pods_checked = True
            before = self._hot(task, e)
            if e.uid is None and not before.counters.get("events_applied", 0) and not create:
                return None
            e.observed = seen or None  # (an empty view, once applied, clears the waiting)
            after = seen.apply(before)
            if after is before and not first:
                return None
            e.state = after
            e.version += 1
            e.touched = time.monotonic()
            return before, after

    def unfinished(self) -> list[TaskRef]:
        """The tasks held whose state is not over."""
        with self._lock:
            entries = list(self._entries.items())
        out = []
        for task, e in entries:
            state = e.state if e.packed is None else None
            if state is None and e.packed is not None:
                state = unpack_state(task, e.packed, self.limits)
            if state is not None and not state.finished:
                out.append(task)
        return out

    def pods_checked(self, task: TaskRef) -> bool:
        with self._lock:
            e = self._entries.get(task)
            return e is None or e.pods_checked

    def identity(self, task: TaskRef) -> tuple[str | None, frozenset[str], frozenset[str]]:
        """(uid of the object the state belongs to, stale uids, buried instances)."""
        with self._lock:
            e = self._entries.get(task)
            if e is None:
                return None, frozenset(), frozenset()
            return e.uid, frozenset(e.stale_uids), e.buried

    def foreign(self, task: TaskRef) -> list[ParsedEvent]:
        """The pending events that name a uid which is neither the state's object nor known
        stale: the object may have been re-created since it was read."""
        with self._lock:
            e = self._entries.get(task)
            if e is None:
                return []
            return [ev for ev in e.pending if ev.regarding_uid
                    and ev.regarding_uid != e.uid and ev.regarding_uid not in e.stale_uids]

    def stale(self, task: TaskRef, uids: set[str]) -> None:
        """No object of ``task`` has these uids (any more): their events are refused."""
        with self._lock:
            e = self._entries.get(task)
            if e is not None:
                for uid in sorted(uids):
                    _remember_stale(e, uid)

    def pending(self, task: TaskRef) -> list[ParsedEvent]:
        """A copy of the events waiting for ``task``'s next fold."""
        with self._lock:
            e = self._entries.get(task)
            return [] if e is None else list(e.pending)

    def drop_unseeded(self, task: TaskRef, events: Sequence[ParsedEvent]) -> None:
        """Drop ``events`` (all refused) from a task that was never seeded; with nothing else
        pending the task leaves memory (a refused name costs nothing lasting)."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or e.seeded:
                return
            gone = {id(ev) for ev in events}
            e.pending = [ev for ev in e.pending if id(ev) not in gone]
            if not e.pending:
                del self._entries[task]

    def refuse(self, task: TaskRef, counts: dict[str, int]) -> bool:
        """Count refused events of a task held here (status.refused); True when the counts
        changed (a status write is due). Only a task with an object, or with accepted facts
        that will create one, counts them: a count alone never creates (or re-creates after
        a delete) a TaskFeedback."""
        counts = {r: n for r, n in counts.items() if n and r in _REFUSED_KEYS}
        if not counts:
            return False
        with self._lock:
            e = self._entries.get(task)
            if e is None or not e.seeded:
                return False
            if e.uid is None and (e.state is None
                                  or not e.state.counters.get("events_applied", 0)):
                return False
            for r, n in counts.items():
                e.refused[r] = min(2**63 - 1, e.refused.get(r, 0) + n)
            e.version += 1
            return True

    def touch(self, task: TaskRef) -> bool:
        """The task's status is due again though its state did not change (its health, a
        function of the time as well, did). True when the task is held."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or not e.seeded or (e.state is None and e.packed is None):
                return False
            e.version += 1
            e.judge = e.version
            return True

    def unread(self, task: TaskRef) -> Unread:
        """What the task's status held that could not be read (``NOTHING_UNREAD``: none)."""
        with self._lock:
            e = self._entries.get(task)
            return NOTHING_UNREAD if e is None else e.unread

    def refused(self, task: TaskRef) -> dict[str, int]:
        with self._lock:
            e = self._entries.get(task)
            return {} if e is None else dict(e.refused)

    def seeded(self, task: TaskRef) -> bool:
        with self._lock:
            e = self._entries.get(task)
            return e is not None and e.seeded

    def evict_idle(self, idle_for: float, busy: Callable[[TaskRef], bool]) -> int:
        """Drop tasks untouched for ``idle_for`` seconds, with nothing pending or unwritten,
        that no worker holds (``busy``). Returns how many were dropped."""
        cutoff = time.monotonic() - idle_for
        with self._lock:
            idle = [t for t, e in self._entries.items()
                    if e.touched < cutoff and not e.pending and e.written >= e.version
                    and not busy(t)]
            for task in idle:
                if self._entries.pop(task).packed is not None:
                    self.compacted -= 1
                self._evicted[task] = None
                while len(self._evicted) > MAX_EVICTED:
                    self._evicted.popitem(last=False)
        return len(idle)

    def compact_idle(self, idle_for: float, busy: Callable[[TaskRef], bool]) -> int:
        """Keep tasks untouched for ``idle_for`` seconds, with nothing pending or unwritten,
        that no worker holds, in their compact form. A state is compacted only once its
        status is proven to rebuild it exactly (else it stays as it is, counted in
        ``not_compactable``). Returns how many were compacted."""
        cutoff = time.monotonic() - idle_for
        with self._lock:
            idle = [(t, e) for t, e in self._entries.items()
                    if e.packed is None and e.state is not None and e.touched < cutoff
                    and not e.pending
                    and e.written >= e.version and not e.unsaved and not busy(t)]
        n = 0
        for task, e in idle:  # packing runs outside the lock: the watch loop must not wait
            state = e.state
            assert state is not None
            packed = pack_state(state)
            if unpack_state(task, packed, self.limits) != state:
                with self._lock:
                    self.not_compactable += 1
                continue
            with self._lock:
                # Only if nothing happened to the entry meanwhile (the same state object,
                # still clean, idle and unheld).
                if (self._entries.get(task) is e and e.state is state and e.packed is None
                        and not e.pending and e.written >= e.version and not e.unsaved
                        and e.touched < cutoff and not busy(task)):
                    e.state, e.packed = None, packed
                    self.compacted += 1
                    n += 1
        return n

    def bury(self, task: TaskRef, uid: str, instances: frozenset[str]) -> None:
        """The TTL deleted ``task``'s TaskFeedback ``uid``, whose status held ``instances``: the
        run is over. Its state goes, with whatever of it was not written; the entry keeps the
        run's emitter instances and uid, so a late fact of that run is refused (deleted_task,
        other_object) instead of re-creating the object, while a new run (new instances)
        starts a new one. Kept as long as the entry (evicted once idle)."""
        with self._lock:
            e = self._entry(task)
            if e.uid is not None and e.uid != uid:
                _remember_stale(e, uid)  # our state is of a newer object already
                return
            mine = self._hot(task, e).applied.instances if e.uid == uid else ()
            _remember_stale(e, uid)
            e.buried = e.buried | instances | frozenset(mine)
            e.state, e.uid, e.rv, e.refused, e.unsaved = new_state(task, self.limits), None, \
                None, {}, []
            e.unread = NOTHING_UNREAD
            e.observed, e.owner = None, None
            e.seeded = True
            e.version += 1
            e.written = e.version
            e.touched = time.monotonic()

    def hold(self, namespace: str | None) -> None:
        """An event source starts a list of ``namespace``'s events (None: every namespace's):
        no task of it is folded until its list is done (``release``). A list comes by name,
        a hash, so a task's events in it come in no order of time; folded as one batch (in
        creation order) once all of it is here, compaction past the instance cap skips
        none of them as late, as it would when a part of it were folded before a page
        holding older events. (Per namespace: a namespace whose list keeps failing holds
        back no other's folds.)"""
        with self._lock:
            self._listing[namespace] = self._listing.get(namespace, 0) + 1

    def release(self, namespace: str | None) -> list[TaskRef]:
        """``namespace``'s list is done: the tasks to fold now (those with events waiting,
        and those whose fold waited), those no other list in progress still holds."""
        with self._lock:
            n = self._listing.pop(namespace, 0) - 1
            if n > 0:
                self._listing[namespace] = n
            out = [t for t in self._waiting if not self._held(t)]
            self._waiting.difference_update(out)
            listed = [t for t, e in self._entries.items() if e.pending and not self._held(t)
                      and (namespace is None or t.namespace == namespace)]
            self._listed.update(listed)
            waiting = set(out)
            return [*out, *(t for t in listed if t not in waiting)]

    def _held(self, task: TaskRef) -> bool:
        return bool(self._listing) and (None in self._listing
                                        or task.namespace in self._listing)

    def listed(self, task: TaskRef) -> bool:
        """Whether the events ``task``'s fold is about to take hold a list's (asked once:
        the answer is forgotten)."""
        with self._lock:
            if task in self._listed:
                self._listed.discard(task)
                return True
            return False

    def wait_for_list(self, task: TaskRef) -> bool:
        """True when a list of ``task``'s events is in progress: its fold waits for the
        list's end (``release`` names it); False: fold it now."""
        with self._lock:
            if not self._held(task):
                return False
            self._waiting.add(task)
            return True

    def push(self, ev: ParsedEvent) -> None:
        """Buffer an event for its task's next fold (called from the watch loop: O(1))."""
        with self._lock:
            e = self._entry(ev.task)
            e.pending.append(ev)
            e.touched = time.monotonic()

    def push_many(self, events: Sequence[ParsedEvent]) -> None:
        """``push`` for every event of one socket read, under one lock."""
        now = time.monotonic()
        with self._lock:
            for ev in events:
                e = self._entry(ev.task)
                e.pending.append(ev)
                e.touched = now

    def take(self, task: TaskRef) -> tuple[TaskState, list[ParsedEvent]]:
        """The current state and all pending events (now owned by the caller)."""
        with self._lock:
            e = self._entry(task)
            pending, e.pending = e.pending, []
            return self._hot(task, e), pending

    def put(self, task: TaskRef, state: TaskState, base: TaskState | None = None,
            events: Sequence[ParsedEvent] = ()) -> int:
        """Store ``state``, the fold of ``events`` onto ``base`` (the state ``take`` gave);
        returns its version. If the state was rebased meanwhile, ``events`` are folded onto
        the rebased state instead, so nothing folded is lost either way."""
        with self._lock:
            e = self._entry(task)
            if base is not None and self._hot(task, e) is not base:
                state = _fold_new(self._hot(task, e), events, e.observed)
            e.state = state
            e.version += 1
            e.unsaved.extend((e.version, ev) for ev in events)
            return e.version

    def rebase(self, task: TaskRef, status: object, rv: str | None, uid: str | None = None,
               owner: Owner | None = None) -> bool:
        """Someone wrote the status (resourceVersion ``rv``) since our state's base: make it
        our base. If it holds events our state lacks (a newer leader's work), the state
        becomes that status plus our unsaved events; otherwise ours already contains all of
        it and only the precondition moves. True when the state changed.

        When the object is another one (``uid``: deleted and re-created), our state is not
        its: it starts from the new object's status, and only the unsaved events that name
        no object (or this one) are applied on top."""
        theirs, their_unread = read_status(task, status, self.limits)
        their_refused = refused_of(status)
        with self._lock:
            e = self._entry(task)
            e.rv = rv
            # A state built on a partial read is not trusted to cover anything.
            was_partial, e.unread = e.unread.partial, their_unread
            e.owner = owner
            if uid and e.uid is not None and uid != e.uid:
                _remember_stale(e, e.uid)
                e.uid = uid
                keep = [ev for _, ev in e.unsaved if ev.regarding_uid in ("", uid)]
                e.observed, e.pods_checked = None, False  # another run: observed afresh
                e.state, e.refused = _fold_new(theirs, keep), their_refused
                e.version += 1
                e.unsaved = [(e.version, ev) for ev in keep]
                changed = True
            else:
                e.uid = e.uid or uid or None
                mine = self._hot(task, e)
                changed = was_partial or not covers(mine.applied, theirs.applied)
                if changed:
                    e.state = _fold_new(theirs, [ev for _, ev in e.unsaved], e.observed)
                    e.version += 1
                # Each leader counts the refusals it saw: the larger count of each reason.
                merged = {r: max(n, e.refused.get(r, 0)) for r, n in their_refused.items()}
                if any(merged.get(r, 0) != e.refused.get(r) for r in merged):
                    e.refused.update(merged)
                    e.version += 1
            saved: list[ParsedEvent] = []
            if e.state == theirs and e.refused == their_refused and e.judge <= e.written:
                # The status already says all we know (we were behind, or our own write
                # landed and only its answer was lost): nothing to write.
                saved = [ev for _, ev in e.unsaved]
                e.written, e.unsaved = e.version, []
        self._saved(saved)
        return changed

    def absent(self, task: TaskRef, new_run: bool = False) -> None:
        """The TaskFeedback object is gone: the next write creates it. A state that belonged
        to that object does not move onto the new one: it starts empty, with the unsaved
        events that name no object applied (those naming the deleted one are not; with
        ``new_run``, none: the object's platform owner was replaced, its run is over)."""
        with self._lock:
            e = self._entry(task)
            e.rv = None
            if e.uid is None:
                return
            _remember_stale(e, e.uid)
            e.uid, e.owner, e.observed, e.pods_checked = None, None, None, False
            e.unread = NOTHING_UNREAD
            keep = [] if new_run else [ev for _, ev in e.unsaved if not ev.regarding_uid]
            e.state, e.refused = _fold_new(new_state(task, self.limits), keep), {}
            e.version += 1
            e.unsaved = [(e.version, ev) for ev in keep]
            if not keep:
                e.written = e.version  # nothing of ours is left to write

    def get(self, task: TaskRef) -> TaskState | None:
        with self._lock:
            e = self._entries.get(task)
            if e is None:
                return None
            if e.packed is not None:  # a read does not make the task hot again
                return unpack_state(task, e.packed, self.limits)
            return e.state

    def unwritten(self, task: TaskRef) -> tuple[TaskState, int, str | None] | None:
        """(state, version, resourceVersion to write over) when the newest state is not
        persisted yet."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or e.written >= e.version:
                return None
            return self._hot(task, e), e.version, e.rv

    def written(self, task: TaskRef, version: int, rv: str | None = None,
                uid: str | None = None, owner: Owner | None = None) -> None:
        """``version`` is persisted; the object (``uid``, owned by ``owner``) is now at
        resourceVersion ``rv``."""
        with self._lock:
            e = self._entry(task)
            e.written = max(e.written, version)
            e.rv = rv
            e.uid = uid or e.uid
            e.owner = owner
            saved = [ev for v, ev in e.unsaved if v <= version]
            e.unsaved = [(v, ev) for v, ev in e.unsaved if v > version]
        self._saved(saved)

    def _saved(self, events: list[ParsedEvent]) -> None:
        if events and self.on_saved is not None:
            self.on_saved(events)

    def tasks(self) -> list[TaskRef]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def covers(ours: VersionVector, theirs: VersionVector) -> bool:
    """Whether every (instance, seq) in ``theirs`` is in ``ours``."""
    for inst in theirs.instances:
        mine = ours.ranges(inst)
        for lo, hi in theirs.ranges(inst):
            if not any(a <= lo and hi <= b for a, b in mine):  # ranges are disjoint, merged
                return False
    return True


def _fold_new(state: TaskState, events: Sequence[ParsedEvent],
              seen: Observations | None = None) -> TaskState:
    """Fold the events ``state`` has not applied yet (duplicates skipped before the fold, as
    the controller does, so the persisted counters never see one), and what the objects
    said (``seen``) again."""
    state = fold_checked(state, events).state
    return state if seen is None else seen.apply(state)
