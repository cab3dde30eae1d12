"""Typed, versioned payloads carried in an Event note.

Strict, frozen pydantic models; every text field is sanitised and every URL vetted on the way in.
Text that was not valid UTF-8 (a lone surrogate) is made valid (U+FFFD) in every text field,
names and URLs included, before any other rule reads it (``schemas.wire.text.valid_text``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, TypeAlias
from urllib.parse import quote, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .constants import NAME_LIMIT, QUIET_LIMIT_S, TYPE_LIMIT, URL_LIMIT, WORKERS_MAX
from .constants import NON_FINITE as NON_FINITE  # (their home is constants.py)
from .constants import non_finite_text as non_finite_text
from .history import HISTORY_POINTS
from .names import valid_object_name
from .refs import valid_uid
from .text import cut_text as cut_text  # (its home is text.py; importers here keep working)
from .text import has_invisible, sanitize_text, valid_text

_MODEL_CONFIG = ConfigDict(
    strict=True,
    frozen=True,
    extra="forbid",
    allow_inf_nan=False,
    # Pydantic would otherwise copy dicts/lists on validation; the models are frozen anyway.
    revalidate_instances="never",
    # Each model's validator and serializer are built on its first use, not at import: a
    # reader of statuses (`tidings state`, the page) never validates a payload.
    defer_build=True,
)


def _clean_text(v: Any) -> Any:
    # Non-strings pass through untouched so strict validation rejects them with its own error.
    return sanitize_text(v) if isinstance(v, str) else v


def name_error(v: str) -> tuple[str, str] | None:
    """Why ``v`` cannot be a name, as (error type, one-line reason), or None when it can.

    Names are keys (rows) of the status, so a name is kept whole or refused, never changed:
    cutting a long one, or stripping what a screen cannot show, would let two names collapse
    into one row (the second silently replacing the first)."""
    # "wandb" and "wandb\u200b" would be two rows that look the same.
    if has_invisible(v):
        return "invisible_text", "name holds zero-width or other invisible format characters"
    if len(v) > NAME_LIMIT:
        # (No length in the text: one problem, one line in the emitter's log.)
        return "name_too_long", (f"name has more than {NAME_LIMIT} characters (names are "
                                 "kept whole, never cut)")
    if sanitize_text(v).strip() != v:
        return "name_text", ("name holds control characters, escape sequences or leading or "
                             "trailing whitespace")
    return None


def _clean_name(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    v = valid_text(v)
    why = name_error(v)
    if why is not None:
        raise PydanticCustomError(*why)
    return v


Text = Annotated[str, BeforeValidator(_clean_text)]
Name = Annotated[str, BeforeValidator(_clean_name), Field(min_length=1)]
OptName = Annotated[str, BeforeValidator(_clean_name)]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*\Z")
# Whitespace, controls, bidi marks and characters that are never legal unescaped in a URL.
# Browsers silently drop tabs/newlines inside URLs ("java\tscript:"), so rejecting them outright
# is the only safe answer; '\\' is rejected because browsers read it as '/'.
_URL_FORBIDDEN = re.compile(
    r"[\x00-\x20\x7f-\x9f\"<>\\`\u00a0\u1680\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff]"
)
# Where a deck can live: object stores, HDFS and the web. An allow-list, since a deny-list
# always misses one (file:, ms-msdt:, blob:, ...). No file: a path on the pod's disk means
# nothing to the reader, and a file: link in a browser or UI opens the *reader's* files.
DECK_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "wasbs", "hdfs",
                          "http", "https"})
_CONTAINER_AT = frozenset({"abfs", "abfss", "wasbs"})
# Non-ASCII is percent-encoded outside the host; these are kept as they are.
_URL_SAFE = "!#$%&'()*+,-./:;=?@[]^_{|}~"


def _normalise_url(v: Any, *, web_only: bool) -> Any:
    if not isinstance(v, str):
        return v
    v = valid_text(v).strip(" ")
    if _URL_FORBIDDEN.search(v):
        raise ValueError("URL contains whitespace, control or forbidden characters")
    if not v.isascii():
        # Keep the host strict (an IDN must arrive in punycode); encode the rest.
        head, sep, rest = v.partition("//")
        host_end = len(rest)
        for ch in "/?#":
            i = rest.find(ch)
            if i != -1:
                host_end = min(host_end, i)
        if not sep or not rest[:host_end].isascii() or not head.isascii():
            raise ValueError("URL host and scheme must be ASCII (use punycode)")
        v = head + sep + rest[:host_end] + quote(rest[host_end:], safe=_URL_SAFE)
    if len(v) > URL_LIMIT:
        raise ValueError(f"URL longer than {URL_LIMIT} characters")
    scheme, colon, _ = v.partition(":")
    if not colon or not _SCHEME.match(scheme):
        raise ValueError("URL must be absolute, with a scheme")
    scheme = scheme.lower()
    try:
        parts = urlsplit(v)
        port = parts.port  # raises on a malformed port
    except ValueError as e:
        raise ValueError(f"malformed URL: {e}") from None
    del port
    # Azure's abfs(s)/wasbs name the container as ``container@account``: not a credential,
    # as long as no password rides along.
    container = scheme in _CONTAINER_AT and ":" not in parts.netloc.rpartition("@")[0]
    if "@" in parts.netloc and not container:
        raise ValueError("credentials (userinfo) are not allowed in URLs")
    if web_only:
        if scheme not in ("http", "https"):
            raise ValueError("only http and https URLs are allowed")
        if not parts.hostname:
            raise ValueError("URL has no host")
    else:
        if scheme not in DECK_SCHEMES:
            raise ValueError(f"the {scheme}: scheme is not allowed "
                             f"(allowed: {', '.join(sorted(DECK_SCHEMES))})")
        if not parts.netloc:
            raise ValueError("URI has no bucket or host")
    return v


def _web_url(v: Any) -> Any:
    return _normalise_url(v, web_only=True)


def web_link(v: str) -> str | None:
    """``v`` as a link target a reader may follow (an http(s) URL by the rules of a LogLink's
    url), or None: a status is read as written, so a URL in it is checked again before any
    page makes it an anchor."""
    try:
        return str(_normalise_url(v, web_only=True))
    except ValueError:
        return None


def _any_uri(v: Any) -> Any:
    return _normalise_url(v, web_only=False)


WebUrl = Annotated[str, BeforeValidator(_web_url)]
SafeUri = Annotated[str, BeforeValidator(_any_uri)]

_TYPE = re.compile(rf"^[A-Za-z][A-Za-z0-9_.\-]{{0,{TYPE_LIMIT - 1}}}\Z")


def _check(valid: Callable[[str], object], what: str) -> AfterValidator:
    def check(v: str) -> str:
        if not valid(v):
            raise ValueError(f"not a valid {what}")
        return v

    return AfterValidator(check)


PodName = Annotated[str, _check(valid_object_name, "Kubernetes object name")]
Uid = Annotated[str, _check(valid_uid, "UID")]
TypeName = Annotated[str, _check(_TYPE.match, "payload type")]
Seconds = Annotated[float, Field(ge=0.0, le=9.0e9)]
Epoch = Annotated[float, Field(ge=0.0, le=1.0e11)]
Counter = Annotated[int, Field(ge=0, le=2**53)]


class LogLink(BaseModel):
    """A named link to logs or a dashboard (http/https only, no credentials)."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "LogLink"

    name: Name
    url: WebUrl


class DeckReady(BaseModel):
    """A report deck is ready at ``uri``, whose scheme is one of ``DECK_SCHEMES``."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "DeckReady"

    name: Name
    uri: SafeUri


class SpanSummary(BaseModel):
    """Aggregates of ``count`` spans named ``name`` over one window; one span is count=1."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "SpanSummary"

    name: Name
    count: Annotated[int, Field(ge=1, le=2**53)]
    total_s: Seconds
    min_s: Seconds
    max_s: Seconds
    first_start: Epoch
    last_end: Epoch
    errors: Counter = 0

    @model_validator(mode="after")
    def _consistent(self) -> SpanSummary:
        why = span_inconsistency(self.count, self.total_s, self.min_s, self.max_s,
                                 self.first_start, self.last_end, self.errors)
        if why is not None:
            raise PydanticCustomError("inconsistent_span", why)
        return self


# Sums of float durations carry rounding error; these bound it generously, far below any
# difference a reader could notice, so only truly inconsistent summaries are refused.
_SPAN_REL, _SPAN_ABS = 1e-9, 1e-6


def span_inconsistency(count: int, total_s: float, min_s: float, max_s: float,
                       first_start: float, last_end: float, errors: int) -> str | None:
    """Why these aggregates cannot describe ``count`` real spans, or None when they can."""
    def le(a: float, b: float) -> bool:
        return a <= b + _SPAN_ABS + _SPAN_REL * max(abs(a), abs(b))

    if errors > count:
        return "errors must not exceed count"
    if not le(min_s, max_s):
        return "min_s must not exceed max_s"
    if not le(max_s, total_s):
        return "total_s must be at least max_s"
    if not le(min_s * count, total_s) or not le(total_s, max_s * count):
        return "total_s must lie between count * min_s and count * max_s"
    if first_start > last_end:
        return "first_start must not be after last_end"
    if not le(max_s, last_end - first_start):
        return "max_s must fit between first_start and last_end"
    return None


# A row of SpanSummaries: [name, count, total_ns, min_ns, max_ns, start_us, end_us, errors],
# durations in integer nanoseconds and times in integer microseconds after ``base_us``.
# Integers instead of floats make a row about half as long, so one note carries a dozen
# names instead of five or six.
SPAN_ROW_FIELDS = 8
# Rows per SpanSummaries note: far more than fit in NOTE_LIMIT bytes; bounds the work per note.
SPAN_ROWS_MAX = 64


def span_row(name: str, count: int, total_s: float, min_s: float, max_s: float,
             first_start: float, last_end: float, errors: int, base_us: int) -> list[Any]:
    """The compact row of one name's aggregates. Rounded outward (min and start down, max
    and end up), so the row still passes ``span_inconsistency`` after rounding."""
    return [name, int(count), round(total_s * 1e9), math.floor(min_s * 1e9),
            math.ceil(max_s * 1e9), math.floor(first_start * 1e6) - base_us,
            math.ceil(last_end * 1e6) - base_us, int(errors)]


def _span_rows(v: Any, info: ValidationInfo) -> Any:
    base = info.data.get("base_us")
    if not isinstance(v, list | tuple) or not isinstance(base, int):
        return v  # strict validation (or the base's own error) explains what is wrong
    out: list[Any] = []
    for row in v:
        if not isinstance(row, list | tuple) or len(row) != SPAN_ROW_FIELDS:
            raise PydanticCustomError(
                "span_row", "a span row is [name, count, totalNs, minNs, maxNs, startUs, "
                "endUs, errors]")
        name, count, total, lo, hi, start, end, errors = row
        if not all(type(x) is int for x in (total, lo, hi, start, end)):
            raise PydanticCustomError("span_row", "span row times must be integers")
        if start < 0 or end < 0 or base + end > 10**17:
            raise PydanticCustomError(
                "span_row", "span row times must lie between base_us and the epoch bound")
        # SpanSummary validates the rest (name rules, bounds, consistency) as for one name.
        out.append(SpanSummary(name=name, count=count, total_s=total / 1e9, min_s=lo / 1e9,
                               max_s=hi / 1e9, first_start=(base + start) / 1e6,
                               last_end=(base + end) / 1e6, errors=errors))
    return tuple(out)


def _wire_rows(spans: tuple[SpanSummary, ...], base: int) -> list[list[Any]]:
    # The in-memory values came from integer rows, so rounding to the nearest unit gives
    # those integers back: decoding and re-encoding yields the same bytes.
    return [[s.name, s.count, round(s.total_s * 1e9), round(s.min_s * 1e9),
             round(s.max_s * 1e9), round(s.first_start * 1e6) - base,
             round(s.last_end * 1e6) - base, s.errors] for s in spans]


class SpanSummaries(BaseModel):
    """The SpanSummary aggregates of several names in one note (one API call for a dozen
    names). On the wire: ``base_us`` (epoch microseconds) and ``spans``, a list of compact
    rows (see ``span_row``); in memory, ``spans`` holds one validated SpanSummary per row."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "SpanSummaries"

    base_us: Annotated[int, Field(ge=0, le=10**17)]
    spans: Annotated[tuple[SpanSummary, ...], Field(min_length=1, max_length=SPAN_ROWS_MAX)]

    _rows = field_validator("spans", mode="before")(_span_rows)

    @model_serializer(mode="plain")
    def _wire(self) -> dict[str, Any]:
        return {"base_us": self.base_us, "spans": _wire_rows(self.spans, self.base_us)}


def _round_fraction(v: Any) -> Any:
    # Four decimals (0.01 %) is all any view shows; 17-digit floats only cost note bytes.
    return round(v, 4) if type(v) is float else v


class Progress(BaseModel):
    """How far this worker is; ``final=True`` marks its terminal progress (critical, never
    dropped) and ``failed=True`` (only with ``final``) says the work failed. ``workers`` (0:
    not declared) is how many workers the task has, so the task completes only once that
    many have reported a final (see the fold's completion rule)."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "Progress"

    fraction: Annotated[float, BeforeValidator(_round_fraction), Field(ge=0.0, le=1.0)]
    message: Text = ""
    final: bool = False
    failed: bool = False
    workers: Annotated[int, Field(ge=0, le=WORKERS_MAX)] = 0

    @model_validator(mode="after")
    def _failed_is_final(self) -> Progress:
        if self.failed and not self.final:
            raise ValueError("failed=True needs final=True (a failure ends the worker)")
        return self


def _metric_value_in(v: Any) -> Any:
    if isinstance(v, str):
        return NON_FINITE.get(v, v)  # (any other string: strict validation refuses it)
    return v


def metric_wire_value(v: float) -> float | str:
    """A metric value as a note or a status spells it: the number, or its ``NON_FINITE``
    string."""
    text = non_finite_text(v)
    return v if text is None else text


def _one_nan(v: float) -> float:
    return math.nan if v != v else v


MetricValue = Annotated[float, Field(allow_inf_nan=True), BeforeValidator(_metric_value_in),
                        AfterValidator(_one_nan), PlainSerializer(metric_wire_value)]


# Points one metric report may carry (its sender's spread sample is no larger).
METRIC_POINTS_MAX = HISTORY_POINTS


def _points(v: Any) -> Any:
    """(step, value) pairs from the wire's flat list, or from pairs (built in Python)."""
    if not isinstance(v, list | tuple):
        return v  # strict validation explains what is wrong
    if v and all(isinstance(p, list | tuple) for p in v):
        pairs = [tuple(p) for p in v]
    elif len(v) % 2:
        raise PydanticCustomError("metric_points", "points is a flat [step, value, ...] list")
    else:
        pairs = list(zip(v[::2], v[1::2], strict=True))
    if len(pairs) > METRIC_POINTS_MAX:
        raise PydanticCustomError("metric_points",
                                  f"at most {METRIC_POINTS_MAX} points per metric")
    out: list[tuple[int, float]] = []
    for p in pairs:
        if len(p) != 2:
            raise PydanticCustomError("metric_points", "a point is a step and a value")
        step, value = p
        if type(step) is not int or not 0 <= step <= 2**53:
            raise PydanticCustomError("metric_points", "a point's step is an int in [0, 2**53]")
        if type(value) not in (int, float) or not math.isfinite(value):
            raise PydanticCustomError("metric_points", "a point's value is a finite number")
        out.append((step, float(value)))
    return tuple(out)


class Metric(BaseModel):
    """The latest value of the named scalar metric ``name`` (loss, learning rate, eval
    accuracy, samples/s), optionally at training ``step``. A value that is not finite (NaN,
    an infinity) is kept: on the wire it is the string ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (``NON_FINITE``).

    What a window's latest value alone would lose, the sender adds (schemas/wire/history.py):
    ``min``/``max``, the extremes of every finite value it saw of the name when they lie
    beyond what it sent before, and ``points``, earlier (step, value) pairs of its own spread
    sample of the run (on the wire a flat ``[step, value, step, value, ...]`` list); the
    extremes and points are finite."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "Metric"

    name: Name
    value: MetricValue
    step: Annotated[int, Field(ge=0, le=2**53)] | None = None
    min: float | None = None
    max: float | None = None
    points: Annotated[tuple[tuple[int, float], ...], BeforeValidator(_points)] = ()

    @model_validator(mode="after")
    def _extremes(self) -> Metric:
        # (A value that is not finite is no part of the extremes: any finite ones may come.)
        if not math.isfinite(self.value):
            return self
        if self.min is not None and self.min > self.value:
            raise PydanticCustomError("metric_extremes", "min must not exceed value")
        if self.max is not None and self.max < self.value:
            raise PydanticCustomError("metric_extremes", "max must not be below value")
        return self

    @field_serializer("points")
    def _flat(self, points: tuple[tuple[int, float], ...]) -> list[float | int]:
        return [x for p in points for x in p]

    @property
    def wire_version(self) -> int:
        """The note schema version a reader needs for this metric: 2 with extremes or
        points (a reader of version 1 keeps such a note as an unknown payload, counted)."""
        return 2 if self.min is not None or self.max is not None or self.points else 1

    def row(self) -> list[Any]:
        """The compact row of a Metrics note: [name, value, step, min, max, points], the
        trailing fields left out while they are unset."""
        out: list[Any] = [self.name, metric_wire_value(self.value), self.step, self.min,
                          self.max, self._flat(self.points)]
        while len(out) > 3 and out[-1] in (None, []):
            out.pop()
        return out


# Rows per Metrics note: far more than fit in NOTE_LIMIT bytes; bounds the work per note.
METRIC_ROWS_MAX = 64
# A metric row's fields: [name, value, step], then optionally min, max and points.
_METRIC_ROW_KEYS = ("name", "value", "step", "min", "max", "points")


def _metric_rows(v: Any) -> Any:
    if not isinstance(v, list | tuple):
        return v  # strict validation explains what is wrong
    out: list[Metric] = []
    for row in v:
        if isinstance(row, Metric):
            out.append(row)
            continue
        if not isinstance(row, list | tuple) or not 3 <= len(row) <= len(_METRIC_ROW_KEYS):
            raise PydanticCustomError(
                "metric_row", "a metric row is [name, value, step or null, min, max, points]"
                " (the last three optional)")
        # Metric validates each row (name rules, the value, the step's bounds, the extremes).
        out.append(Metric(**{k: x for k, x in zip(_METRIC_ROW_KEYS, row, strict=False)
                             if x is not None or k == "step"}))
    if len({m.name for m in out}) != len(out):
        raise PydanticCustomError("metric_row", "the names of one note's metrics must differ")
    return tuple(out)


class Metrics(BaseModel):
    """Several metrics' latest values in one note (one API call per window for a dozen
    names). On the wire ``metrics`` is a list of ``[name, value, step or null]`` rows, each
    optionally followed by its min, max and points (see ``Metric``); in memory one
    validated Metric per row, each folded as one Metric event would be."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "Metrics"

    metrics: Annotated[tuple[Metric, ...], Field(min_length=1, max_length=METRIC_ROWS_MAX)]

    _rows = field_validator("metrics", mode="before")(_metric_rows)

    @model_serializer(mode="plain")
    def _wire(self) -> dict[str, Any]:
        return {"metrics": [m.row() for m in self.metrics]}

    @property
    def wire_version(self) -> int:
        return max(m.wire_version for m in self.metrics)


def _window_progress(v: Any) -> Any:
    if isinstance(v, Progress) and v.final:
        raise PydanticCustomError("window_progress", "a final progress is sent on its own")
    return v


class Window(BaseModel):
    """A worker's coalescible facts of one reporting window in one note: its latest
    non-final progress, its metrics' latest values and its span aggregates (the emitter's
    one event per window instead of one per kind). On the wire ``progress`` is a Progress's
    fields, ``metrics`` Metrics' rows (with a metric's extremes and points) and
    ``base_us``/``spans`` SpanSummaries'; each part is folded as its own event would be, so
    packing changes nothing in the state. At least one part is present."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "Window"

    progress: Annotated[Progress | None, AfterValidator(_window_progress)] = None
    metrics: Annotated[tuple[Metric, ...], Field(max_length=METRIC_ROWS_MAX)] = ()
    base_us: Annotated[int, Field(ge=0, le=10**17)] = 0
    spans: Annotated[tuple[SpanSummary, ...], Field(max_length=SPAN_ROWS_MAX)] = ()

    _metric_rows = field_validator("metrics", mode="before")(_metric_rows)
    _span_rows = field_validator("spans", mode="before")(_span_rows)

    @model_validator(mode="after")
    def _not_empty(self) -> Window:
        if self.progress is None and not self.metrics and not self.spans:
            raise ValueError("a window carries a progress, metrics or spans")
        return self

    @model_serializer(mode="plain")
    def _wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.progress is not None:
            out["progress"] = self.progress.model_dump(exclude_defaults=True)
        if self.metrics:
            out["metrics"] = [m.row() for m in self.metrics]
        if self.spans:
            out["base_us"] = self.base_us
            out["spans"] = _wire_rows(self.spans, self.base_us)
        return out

    @property
    def wire_version(self) -> int:
        """2 when a metric row carries extremes or points (see ``Metric``), else 1."""
        return max((m.wire_version for m in self.metrics), default=1)


class Quiet(BaseModel):
    """This worker will be quiet on purpose for up to ``seconds`` from now (a checkpoint
    being written, an evaluation), because of ``reason``: its silence is not called
    ``Stalled`` until that period, and the usual allowance after it, are over. The period
    counts from when the API server received the note, not the sender's clock; the
    worker's next progress report ends it."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "Quiet"

    seconds: Annotated[float, Field(gt=0.0, le=QUIET_LIMIT_S)]
    reason: Text = ""


class PodSpawned(BaseModel):
    """Lineage record: pod ``pod_name``/``pod_uid`` was spawned for app or owner ``app``."""

    model_config = _MODEL_CONFIG
    TYPE: ClassVar[str] = "PodSpawned"

    pod_name: PodName
    pod_uid: Uid
    app: Name
    role: OptName = ""
    attempt: Annotated[int, Field(ge=0, le=2**31)] = 0


def _clean_json(v: Any, depth: int = 0) -> Any:
    if depth > 64:
        raise ValueError("raw payload nested too deeply")
    if isinstance(v, str):
        return sanitize_text(v)
    if isinstance(v, dict):
        return {sanitize_text(str(k)): _clean_json(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean_json(x, depth + 1) for x in v]
    if v is None or isinstance(v, bool):
        return v
    # Only what orjson can write back: int64/uint64 and finite floats.
    if isinstance(v, int) and -(2**63) <= v < 2**64:
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise ValueError(f"raw payload holds a non-JSON value of type {type(v).__name__}")


# Top-level note keys owned by the envelope (see note.py); never payload fields.
ENVELOPE_KEYS = frozenset({"v", "t", "i", "s"})


def _clean_raw(v: Any) -> Any:
    v = _clean_json(v)
    # Filtered after cleaning, since cleaning a key ("\x00s") can turn it into one ("s").
    if isinstance(v, dict):
        v = {k: x for k, x in v.items() if k not in ENVELOPE_KEYS}
    return v


class UnknownPayload(BaseModel):
    """A payload of a type or schema version this code does not know: kept and counted."""

    model_config = _MODEL_CONFIG
    # The Event reason of an unknown payload is its ``type`` field; see ``payload_type``.
    TYPE: ClassVar[str] = "Unknown"

    type: Annotated[str, BeforeValidator(_clean_text), _check(_TYPE.match, "payload type")]
    version: Annotated[int, Field(ge=1, le=2**31)]
    raw: Annotated[dict[str, Any], BeforeValidator(_clean_raw)] = Field(default_factory=dict)


Payload: TypeAlias = (LogLink | DeckReady | Metric | Metrics | SpanSummary | SpanSummaries
                      | Progress | Window | Quiet | PodSpawned | UnknownPayload)

def span_summaries(p: Payload) -> tuple[SpanSummary, ...]:
    """The per-name span summaries ``p`` carries: its rows, itself, or none."""
    if isinstance(p, SpanSummaries | Window):
        return p.spans
    return (p,) if isinstance(p, SpanSummary) else ()


def payload_version(p: Payload) -> int:
    """The note schema version ``p`` is written with: the oldest that can read it (a
    reader keeps a note of a newer version as an unknown payload)."""
    if isinstance(p, UnknownPayload):
        return p.version
    return int(getattr(p, "wire_version", 1))


def payload_type(p: Payload) -> str:
    """The Event reason for ``p``: its TYPE, or the carried type of an UnknownPayload."""
    return p.type if isinstance(p, UnknownPayload) else p.TYPE
