"""What the workload side hands the sender thread: queue items, control signals, the
latest-wins progress slot and the latest-per-name slot of coalescible named facts.

Items stay plain tuples (a put is on the workload's path; a NamedTuple would cost a call);
the aliases give them precise types. An item names its payload model by its type (``"LogLink"``,
the model's ``TYPE``): the models (pydantic) load on the sender thread, which validates, never
on the workload's path.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from tidings.schemas.wire.payloads import Payload
    from tidings.schemas.wire.refs import ObjectRef, TaskRef

from .curves import Curve

# Where an item goes: None is the workload's own task; else the task and, for lineage about
# an app that is not a TaskFeedback, the object the event is regarding.
Target: TypeAlias = "tuple[TaskRef, ObjectRef | None]"

# (payload type and its fields | None and a ready payload, epoch time, warning, target).
Item: TypeAlias = (
    "tuple[str, dict[str, Any], float, bool, Target | None]"
    " | tuple[None, Payload, float, bool, Target | None]"
)

# A pending non-final progress: (fraction, message, epoch time).
ProgressUpdate: TypeAlias = "tuple[float, str, float]"
# A pending coalescible named fact (a metric): its type and name -> (its fields, epoch time).
LatestKey: TypeAlias = "tuple[str, str]"
LatestUpdate: TypeAlias = "tuple[dict[str, Any], float]"


class Signal:
    """A control item: wake the sender (the progress slot was filled) or stop it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


WAKE = Signal("wake")
STOP = Signal("stop")


class Flush:
    """A flush request: everything queued before it must settle before ``gen`` is reported."""

    __slots__ = ("gen",)

    def __init__(self, gen: int) -> None:
        self.gen = gen


class FlushGate:
    """Flushes between the two sides: the workload numbers them (``ask``) and waits; the
    sender reports the newest it settled (``settle``), or that it stopped for good
    (``die``: every waiter wakes, unsettled)."""

    __slots__ = ("_asked", "_cond", "dead", "settled")

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._asked = 0
        self.settled = 0
        self.dead = False

    def ask(self) -> int:
        with self._cond:
            self._asked += 1
            return self._asked

    def wait(self, gen: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.settled >= gen or self.dead,
                                       max(0.0, timeout)) and not self.dead

    def settle(self, gen: int) -> None:
        with self._cond:
            self.settled = max(self.settled, gen)
            self._cond.notify_all()

    def die(self) -> None:
        with self._cond:
            self.dead = True
            self._cond.notify_all()


QueueItem: TypeAlias = "Item | Signal | Flush"


class LatestSlot:
    """The latest value of each name of a coalescible named kind (a metric), waiting for the
    sender's next window: a newer value of a name replaces the older one (counted as
    coalesced), so a loop that logs every step costs one event per name per window. At most
    ``max_names`` names wait; a new name beyond them is dropped and counted.

    A metric's every value also goes into its name's ``Curve`` (curves.py: its extremes and
    spread sample, which the sender adds to the rows), for at most ``max_names`` names over
    the run; the curve keeps the name's latest update too, for a window in which only the
    curve has news."""

    __slots__ = ("coalesced", "curves", "dropped", "lock", "max_names", "values")

    def __init__(self, max_names: int) -> None:
        self.lock = threading.Lock()
        self.values: dict[LatestKey, LatestUpdate] = {}
        self.max_names = max(1, max_names)
        self.coalesced = 0
        self.dropped = 0
        self.curves: dict[LatestKey, Curve] = {}

    def put(self, key: LatestKey, update: LatestUpdate,
            point: tuple[float, int | None] | None = None) -> bool:
        """Set ``key``'s latest value (and add ``point``, a value and its step, to its
        curve); False when it was a new name and none fit."""
        with self.lock:
            values = self.values
            if key in values:
                self.coalesced += 1
            elif len(values) >= self.max_names:
                self.dropped += 1
                return False
            values[key] = update
            if point is not None:
                curve = self.curves.get(key)
                if curve is None:
                    if len(self.curves) >= self.max_names:
                        return True
                    curve = self.curves[key] = Curve()
                curve.add(*point)
                curve.last = update
            return True

    def drain(self) -> dict[LatestKey, LatestUpdate]:
        with self.lock:
            values, self.values = self.values, {}
        return values

    def untold(self) -> dict[LatestKey, LatestUpdate]:
        """The latest update of each name whose curve still has something to tell (a point
        that found no room in the notes, an extreme of a lost note)."""
        with self.lock:
            return {key: c.last for key, c in self.curves.items() if c.pending}

    def __len__(self) -> int:
        return len(self.values)


class ProgressSlot:
    """The latest non-final progress, waiting for the sender: a new update replaces the old
    one (counted as coalesced), also one the sender holds while it waits for budget. The
    workload side sets ``value`` under ``lock`` inline (Emitter.progress is a hot path)."""

    __slots__ = ("coalesced", "lock", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: ProgressUpdate | None = None
        self.coalesced = 0

    def take(self, held: ProgressUpdate | None) -> ProgressUpdate | None:
        """The sender's turn: the newest update, replacing ``held`` (which then counts as
        coalesced); ``held`` itself when nothing newer came."""
        with self.lock:
            if self.value is None:
                return held
            if held is not None:
                self.coalesced += 1
            value, self.value = self.value, None
            return value
