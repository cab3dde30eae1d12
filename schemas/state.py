"""Task state and the fold, as one import: the public names of the three modules that hold them.

The work is split by job: schemas/taskstate.py (the state's types, limits and ``.status``
encoding), schemas/folding.py (the fold engine; its docstring states the fold's rules) and
schemas/decoding.py (``.status`` back to a state). Code outside ``schemas`` imports from
here or from ``tidings.schemas``.
"""

from __future__ import annotations

from .decoding import decode_status
from .folding import APPLY, WINDOW_BUCKETS, Checked, fold, fold_all, fold_checked, fold_many
from .taskstate import (
    BUDGET_DROP_ORDER,
    CLOCK_SKEW,
    COUNTER_NAMES,
    DEFAULT_LIMITS,
    FAILED,
    MESSAGE_LIMIT,
    PENDING,
    RUNNING,
    STATUS_BUDGET,
    STATUS_VERSION,
    SUCCEEDED,
    Limits,
    Named,
    OrderKey,
    ProgressState,
    SpanAgg,
    TaskProgress,
    TaskState,
    new_state,
)

__all__ = [
    "APPLY",
    "BUDGET_DROP_ORDER",
    "CLOCK_SKEW",
    "COUNTER_NAMES",
    "DEFAULT_LIMITS",
    "FAILED",
    "MESSAGE_LIMIT",
    "PENDING",
    "RUNNING",
    "STATUS_BUDGET",
    "STATUS_VERSION",
    "SUCCEEDED",
    "WINDOW_BUCKETS",
    "Checked",
    "Limits",
    "Named",
    "OrderKey",
    "ProgressState",
    "SpanAgg",
    "TaskProgress",
    "TaskState",
    "decode_status",
    "fold",
    "fold_all",
    "fold_checked",
    "fold_many",
    "new_state",
]
