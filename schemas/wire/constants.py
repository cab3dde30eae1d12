"""Fixed names and limits of the tidings wire contract.

Everything here is shared by the emitter, the watcher and the CLI; change nothing lightly.
"""

from __future__ import annotations

import math
from typing import Final

BUS_CONTROLLER: Final = "tidings.dev/bus"
TASK_LABEL: Final = "tidings.dev/task"
API_GROUP: Final = "tidings.dev"
API_VERSION: Final = "tidings.dev/v1alpha1"
KIND: Final = "TaskFeedback"
PLURAL: Final = "taskfeedbacks"

EVENTS_API_VERSION: Final = "events.k8s.io/v1"
ACTION: Final = "Report"
INSTANCE_ANNOTATION: Final = "tidings.dev/instance"
SEQ_ANNOTATION: Final = "tidings.dev/seq"

# The API server counts note bytes (its message says "characters").
NOTE_LIMIT: Final = 1024
# The newest note schema this code reads. A note carries the oldest version that can read it
# (payloads.payload_version), so a reader of an older version keeps a note that needs a newer
# one as an unknown payload, counted. 2: metric reports with extremes and points.
SCHEMA_VERSION: Final = 2

# Bounds chosen so that every valid payload fits in NOTE_LIMIT once its shrinkable text
# is cut: the URL, the envelope and the fixed fields alone stay well under 1024 bytes.
URL_LIMIT: Final = 800
INSTANCE_LIMIT: Final = 64
SEQ_MAX: Final = 2**63 - 1
# Status numbers are int64 in the API server: sums saturate there, a reader refuses more.
INT64_MAX: Final = 2**63 - 1
# Names are map keys in the persisted status; bounding them bounds the status size.
NAME_LIMIT: Final = 64
TYPE_LIMIT: Final = 128
# The largest worker count a Progress may declare (and so the largest task that can complete).
WORKERS_MAX: Final = 10_000
REPORTING_INSTANCE_LIMIT: Final = 128
# A task id is an object name and a label value: the label limit is the tighter one.
TASK_ID_MAX: Final = 63
# The sender proof: the emitting pod's uid, admitted only from that pod's bound token
# (deploy/admission-policy.yaml), so it outlives the pod.
SENDER_UID_ANNOTATION: Final = "tidings.dev/sender-uid"

# Characters of a worker's progress message kept in the status (the note allows ~1000 bytes;
# a status line needs far less, and 64 workers' messages must stay small).
MESSAGE_LIMIT: Final = 256

# A metric value that is not finite is a health fact (a diverging loss), so it is carried,
# not refused. JSON has no spelling for it: on the wire (a note, the status) it is one of
# these strings, as in protobuf's JSON mapping; in memory the float (NaN as ``math.nan``,
# one object, so that states holding it compare equal).
NON_FINITE: Final[dict[str, float]] = {"NaN": math.nan, "Infinity": math.inf,
                                       "-Infinity": -math.inf}


def non_finite_text(v: float) -> str | None:
    """``v``'s wire spelling when it is not finite (NaN, Infinity, -Infinity), else None."""
    if v != v:
        return "NaN"
    if v in (math.inf, -math.inf):
        return "Infinity" if v > 0 else "-Infinity"
    return None


# The API paths, selectors and phase names built from these are in contract.py.



# The longest quiet period a worker may declare (payloads.Quiet), in seconds: one day. A
# longer one is refused; within it the watcher holds a declaration to its own cap
# (``quiet_max``, 1 h by default: schemas/status/health.py). A quiet period's reason is kept cut
# to QUIET_REASON_LIMIT characters.
QUIET_LIMIT_S: Final = 86_400.0
QUIET_REASON_LIMIT: Final = 64
