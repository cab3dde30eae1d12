"""The kind registry: every kind of fact the bus carries, declared once (pure data).

An entry says what a kind is everywhere it matters: its payload models (the Event reasons),
whether a fact of it is critical or coalescible (the watcher's write urgency), its status
section with its cap and counters, where it stands in the status budget's drop order, which
text fields the note codec may shorten, and how the CLI shows it. The note codec, the fold,
the status codec, the write scheduler and the CLI read this table instead of naming kinds.

A *named* kind (links, decks, metrics) is a map of last-writer-wins registers, one per name;
its entry alone makes the fold, the status codec and the CLI handle it. The other families
(spans, progress, window, quiet, lineage, unknown) have their own merge in schemas/engine/apply.py.
ARCHITECTURE.md ("Adding a kind of fact") lists the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel

from . import payloads
from .payloads import Metric, Payload, Progress

Urgency = Literal["critical", "coalescible"]
# Critical: written within the watcher's write interval. Coalescible: a newer fact of the
# same kind supersedes it, so it waits for the coalescing interval and merges with others.
CRITICAL: Final = "critical"
COALESCIBLE: Final = "coalescible"

Family = Literal["named", "spans", "progress", "window", "quiet", "lineage", "unknown"]
# One scalar of a named register's value; None is an optional field left out.
Scalar = str | int | float | None
# What one report adds to a curve: value, step, the sender's min and max, earlier points.
Report = tuple[float, int | None, float | None, float | None, tuple[tuple[int, float], ...]]


@dataclass(frozen=True, slots=True)
class ValueField:
    """One value field of a named kind: the payload attribute, its key in the status entry,
    its JSON type (the status decoder checks it), and the CLI column that shows it."""

    attr: str
    type: Literal["str", "float", "int"]
    header: str
    optional: bool = False  # absent (None) values are left out of the status
    style: str = ""  # the CLI cell's rich style
    # A float that may be NaN or infinite: such a value goes in the status under this key
    # instead, spelt "NaN", "Infinity" or "-Infinity" (JSON has no number for it).
    non_finite: str = ""
    help: str = ""  # `tidings emit`'s help for the field's argument or flag
    minimum: int | None = None  # `tidings emit` refuses less (an int field: a step)


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of fact. ``section`` is the status key (camelCase) and also the name of the
    CRD property; ``cap`` the ``Limits`` field that bounds it; ``capped`` the counter of the
    events beyond that cap; ``drop_rank`` orders the sections the status budget gives up
    (lowest first; None: never dropped); ``detail_rank`` orders, among them, when it gives
    up the ``detail`` field of the section's entries (counted as ``detail_drop``)."""

    name: str  # the kind's own name (registry key, docs)
    models: tuple[type[BaseModel], ...]
    family: Family
    urgency: Urgency
    # When set, a fact of this kind is critical if this says so (a final Progress).
    critical_if: Callable[[Payload], bool] | None = None
    section: str = ""
    cap: str = ""
    capped: str = ""
    counters: tuple[str, ...] = ()  # further counters of this kind (snake_case)
    drop_rank: int | None = None
    # A field of each entry the budget gives up first (from the last entry on; the last field
    # of the entry's record), its name in ``budgetDropped``, and its place in the drop order;
    # or, with ``detail_section``, the detail is that section's entries, one per name (a span
    # name's lanes), given up whole.
    detail: str = ""
    detail_drop: str = ""
    detail_rank: int | None = None
    detail_section: str = ""
    # A named kind with a value that may be non-finite: the status section of its names
    # beyond the cap, whose latest value's finiteness is kept (``Limits.beyond`` of them;
    # never dropped by the budget: a health condition reads them), and the counter of the
    # reports of names beyond those.
    beyond: str = ""
    unjudged: str = ""
    # Text fields the note codec may cut, in this order (never a name: names are kept whole
    # or refused, so two cannot collapse into one).
    shrink: tuple[str, ...] = ()
    # Named kinds: the register's key attribute and its value fields; ``batch``, the field
    # of a model that carries several rows (each a payload of the first model, folded as
    # one event of its name).
    key: str = "name"
    values: tuple[ValueField, ...] = ()
    batch: str = ""
    # Named kinds with a curve: a payload's report (value, step, min, max, points), joined
    # into the register's extremes and history (schemas/wire/history.py) whatever its order.
    report: Callable[[Any], Report] | None = None
    # CLI: the table title; ``age`` adds a column with how long ago each entry was written;
    # ``inline``: the one-line view (``watch`` piped) shows the registers as name=value.
    title: str = ""
    age: bool = False
    inline: bool = False
    # Named kinds: the `tidings emit` sub-command that sends one fact of the kind (also the
    # Emitter method, '_' for '-', called with the key and value fields by name), its help
    # and the key's; ``arguments``: the key and required values are positional (NAME VALUE),
    # else flags (--name --url).
    command: str = ""
    command_help: str = ""
    key_help: str = ""
    arguments: bool = False

    def urgency_of(self, payload: Payload) -> Urgency:
        if self.critical_if is not None and self.critical_if(payload):
            return CRITICAL
        return self.urgency

    @property
    def budget_section(self) -> str:
        return self.section


def _final(p: Payload) -> bool:
    return isinstance(p, Progress) and p.final


def _metric_report(m: Metric) -> Report:
    return m.value, m.step, m.min, m.max, m.points


KINDS: tuple[Kind, ...] = (
    Kind("links", (payloads.LogLink,), "named", CRITICAL, section="links", cap="links",
         capped="links_capped", drop_rank=60,
         values=(ValueField("url", "str", "URL", style="cyan", help="An http(s) URL."),),
         title="Links", command="log-link", key_help="Link name, e.g. wandb.",
         command_help="Publish a named link (W&B run, dashboard, logs)."),
    Kind("decks", (payloads.DeckReady,), "named", CRITICAL, section="decks", cap="decks",
         capped="decks_capped", drop_rank=50,
         values=(ValueField("uri", "str", "URI", style="cyan",
                            help="Where the deck is (s3://, gs://, https://)."),),
         title="Decks", command="deck-ready", key_help="Deck name.",
         command_help="Announce that a report deck is ready."),
    Kind("metrics", (payloads.Metric, payloads.Metrics), "named", COALESCIBLE,
         section="metrics", cap="metrics", capped="metrics_capped", batch="metrics",
         beyond="metricsBeyond", unjudged="metrics_unjudged",
         drop_rank=35, detail="history", detail_drop="metricHistory", detail_rank=30,
         values=(ValueField("value", "float", "VALUE", non_finite="nonFinite",
                            help="Its latest value (nan, inf and -inf are sent as such: the "
                                 "task's NonFiniteMetrics condition names them)."),
                 ValueField("step", "int", "STEP", optional=True, minimum=0,
                            help="The training step it belongs to.")),
         report=_metric_report, title="Metrics", age=True, inline=True,
         command="metric", key_help="Metric name, e.g. loss.", arguments=True,
         command_help="Report the latest value of a named scalar metric (loss, learning "
                      "rate, accuracy)."),
    Kind("spans", (payloads.SpanSummary, payloads.SpanSummaries), "spans", COALESCIBLE,
         section="spans", cap="spans", capped="spans_capped", drop_rank=40,
         detail_section="spanLanes", detail_drop="spanLanes", detail_rank=25, title="Spans"),
    Kind("progress", (Progress,), "progress", COALESCIBLE, critical_if=_final,
         section="workers", cap="workers", capped="workers_capped", detail="message",
         detail_drop="workerMessages", detail_rank=20, shrink=("message",), title="Workers"),
    # A worker's window of coalescible facts (progress, metrics, spans) in one note: each part
    # is folded, capped and shown as its own kind's (no section of its own).
    Kind("window", (payloads.Window,), "window", COALESCIBLE),
    # A worker's declared quiet period (one per running pod, the latest received): what
    # Stalled reads beside its pace. Bounded like the roster, by pod; never urgent (it only
    # keeps a condition from holding).
    Kind("quiet", (payloads.Quiet,), "quiet", COALESCIBLE, section="quiet", cap="roster",
         capped="quiet_capped", counters=("quiet_declared",), drop_rank=33,
         shrink=("reason",)),
    Kind("lineage", (payloads.PodSpawned,), "lineage", CRITICAL, counters=("pods_spawned",)),
    Kind("unknown", (payloads.UnknownPayload,), "unknown", CRITICAL, section="unknownTypes",
         cap="unknown_types", capped="unknown_capped", counters=("unknown_payloads",),
         drop_rank=10),
)

# What the status budget gives up, in this order (after the sender pods): each kind's
# section (``drop_rank``) or its entries' detail (``detail_rank``), as (rank, (budgetDropped
# key, section, the entries' field or "" for whole entries)); the status encoder places its
# own sections among them by rank.
BUDGET_RANKED: tuple[tuple[int, tuple[str, str, str]], ...] = tuple(sorted(
    [(k.drop_rank, (k.budget_section, k.section, "")) for k in KINDS
     if k.drop_rank is not None]
    + [(k.detail_rank, (k.detail_drop, k.detail_section or k.section, k.detail))
       for k in KINDS if k.detail_rank is not None]))
BUDGET_STEPS: tuple[tuple[str, str, str], ...] = tuple(step for _, step in BUDGET_RANKED)

# Each payload model -> its kind.
KIND_OF_MODEL: dict[type[BaseModel], Kind] = {m: k for k in KINDS for m in k.models}
NAMED_KINDS: tuple[Kind, ...] = tuple(k for k in KINDS if k.family == "named")

# The payload models the note codec decodes, by Event reason (Unknown is the fallback).
KNOWN_PAYLOADS: dict[str, type[BaseModel]] = {
    m.TYPE: m  # type: ignore[attr-defined]
    for k in KINDS for m in k.models if m is not payloads.UnknownPayload}
# Text fields that may be cut to make a note fit, in the order they are given up.
SHRINKABLE: dict[str, tuple[str, ...]] = {
    m.TYPE: fields  # type: ignore[attr-defined]
    for k in KINDS for m in k.models if m is not payloads.UnknownPayload
    if (fields := tuple(f for f in k.shrink if f in m.model_fields))}


def urgency(payload: Payload, warning: bool = False) -> Urgency:
    """How soon a fact must reach the status: a warning (a failure report) is always
    critical, as is a payload of a model this table does not know."""
    kind = KIND_OF_MODEL.get(type(payload))
    if warning or kind is None:
        return CRITICAL
    return kind.urgency_of(payload)
