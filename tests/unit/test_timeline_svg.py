"""The timeline SVG as a person sees it: rendered to PNG (cairosvg), nothing leaves the picture
and no two kinds of thing (heading, tick labels, span names, bars, stats) share a pixel; the
axis labels are distinct at every scale; and the file is well-formed XML whatever the names."""

from __future__ import annotations

import io
import types
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.cli.timeline_cmd import elide, rows, svg, ticks
from tidings.schemas.engine.state import SpanAgg

T0 = 1.7e9


def agg(start: float, end: float, count: int = 1, errors: int = 0, shift: int = 0) -> SpanAgg:
    """A folded span name as the fold keeps it: windows in buckets of 2**shift µs."""
    q = 1 << shift
    lo, hi = int(start * 1e6) // q, -(-int(end * 1e6) // q)
    return SpanAgg(count=count, total_ns=round((end - start) * 1e9), min_s=(end - start) / count,
                   max_s=end - start, first_start=start, last_end=end, errors=errors, events=1,
                   shift=shift, windows=((lo, hi),))


def laned(lanes: dict[str, SpanAgg], unlaned: int = 0) -> SpanAgg:
    """A span name folded from several pods: its totals, and a lane per pod."""
    first = min(a.first_start for a in lanes.values())
    last = max(a.last_end for a in lanes.values())
    count = sum(a.count for a in lanes.values()) + unlaned
    total = agg(first, last, count=count, errors=sum(a.errors for a in lanes.values()))
    return SpanAgg(count=count, total_ns=sum(a.total_ns for a in lanes.values()),
                   min_s=min(a.min_s for a in lanes.values()),
                   max_s=max(a.max_s for a in lanes.values()), first_start=first,
                   last_end=last, errors=total.errors, events=len(lanes) + unlaned,
                   windows=total.windows, lanes=lanes, unlaned=unlaned)


def chart(spans: dict[str, SpanAgg], task: str = "fit", namespace: str = "ml") -> str:
    return svg(task, namespace, rows(types.SimpleNamespace(spans=spans)))


# What broke the SVG before: a 500-character name, a 3 µs span, wide characters, long heading.
CASES = {
    "long name": {"data-loading-" + "x" * 490: agg(T0, T0 + 30, count=1000),
                  "epoch": agg(T0 + 30, T0 + 3000, count=12, errors=3)},
    "3 µs span": {"step": agg(T0, T0 + 3e-6, shift=2), "io": agg(T0 + 1e-6, T0 + 2e-6)},
    # Folded in 8 µs buckets: the stored window runs 4 µs past the last end.
    "coarse window": {"step": agg(T0 + 1e-6, T0 + 4e-6, shift=3)},
    "wide characters": {"進捗" * 100: agg(T0, T0 + 2), "e\u0301" * 300: agg(T0 + 1, T0 + 5)},
    "hours": {"train": agg(T0, T0 + 7 * 3600, count=10**6, errors=10**5)},
    # A lane per pod under each name, one slow, names at the API's limit.
    "pods": {"train_step": laned({f"trainer-{i}": agg(T0, T0 + 60, count=300 - 200 * (i == 2))
                                  for i in range(4)}),
             "evaluation": laned({"trainer-0-" + "p" * 243: agg(T0 + 60, T0 + 70),
                                  "trainer-1": agg(T0 + 60, T0 + 75, errors=1)}, unlaned=7)},
}
LAYERS = ("heading", "tick", "label", "bar", "stats", "grid")


def _png(text: str) -> Any:
    cairosvg = pytest.importorskip("cairosvg")
    from PIL import Image

    try:
        data = cairosvg.svg2png(bytestring=text.encode("utf-8"))
    except OSError as err:  # cairocffi could not load the C library
        pytest.skip(f"libcairo2 is not installed (Debian package; `make debs`): {err}")
    return Image.open(io.BytesIO(data)).getchannel("A")


def _layer(text: str, keep: str, margin: int = 0) -> Any:
    """The alpha channel of the chart drawn with only the elements of class ``keep`` (no
    background), on a canvas ``margin`` px larger on every side than the picture."""
    ET.register_namespace("", "http://www.w3.org/2000/svg")
    root = ET.fromstring(text)
    for child in list(root):
        if child.get("class") != keep:
            root.remove(child)
    w, h = int(root.get("width", "0")), int(root.get("height", "0"))
    root.set("width", str(w + 2 * margin))
    root.set("height", str(h + 2 * margin))
    root.set("viewBox", f"{-margin} {-margin} {w + 2 * margin} {h + 2 * margin}")
    return _png(ET.tostring(root, encoding="unicode"))


@pytest.mark.parametrize("case", list(CASES))
def test_nothing_leaves_the_picture(case: str) -> None:
    text = chart(CASES[case], task="t" * 63, namespace="n" * 63)
    root = ET.fromstring(text)
    w, h, margin = int(root.get("width", "0")), int(root.get("height", "0")), 300
    # 4 px of the 10 px padding must stay clear: renderers differ by a few pixels in a
    # 30-character line (cairo rounds a 12 px monospace advance to 7 px, browsers use 7.2).
    clear = 4
    for layer in LAYERS:
        box = _layer(text, layer, margin).getbbox()
        assert box is not None, f"{layer} draws nothing"
        left, top, right, bottom = box
        inside = margin + clear <= left and margin <= top and right <= margin + w - clear \
            and bottom <= margin + h
        assert inside, f"{case}: {layer} ink {box} outside the picture {(margin, margin)}+{w}x{h}"


def test_a_bar_ends_where_its_spans_ended() -> None:
    # The "coarse window" case: spans from 1 µs to 4 µs, stored in one 0-8 µs bucket.
    (row,) = rows(types.SimpleNamespace(spans=CASES["coarse window"]))
    assert row["windows"] == [[0.0, pytest.approx(3e-6, abs=1e-7)]]


@pytest.mark.parametrize("case", list(CASES))
def test_no_two_kinds_of_thing_share_a_pixel(case: str) -> None:
    from PIL import ImageChops

    text = chart(CASES[case])
    ink = {layer: _layer(text, layer) for layer in LAYERS}
    for i, a in enumerate(LAYERS):
        for b in LAYERS[i + 1:]:
            if {a, b} == {"bar", "grid"}:
                continue  # bars are drawn over the grid lines on purpose
            both = ImageChops.multiply(ink[a], ink[b]).point(lambda v: 255 if v > 8 else 0)
            assert both.getbbox() is None, f"{case}: {a} and {b} overlap at {both.getbbox()}"


def test_a_long_name_is_elided_with_the_whole_name_as_its_tooltip() -> None:
    name = "data-loading-" + "x" * 490
    root = ET.fromstring(chart({name: agg(T0, T0 + 1)}))
    ns = {"s": "http://www.w3.org/2000/svg"}
    label = root.find("s:g[@class='label']", ns)
    assert label is not None
    assert label.findtext("s:title", namespaces=ns) == name
    shown = label.findtext("s:text", namespaces=ns) or ""
    assert shown.startswith("data-loading-x") and shown.endswith("…") and len(shown) < 40


def test_the_3us_axis_has_distinct_labels() -> None:
    root = ET.fromstring(chart(CASES["3 µs span"]))
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
              if t.get("class") == "tick"]
    assert labels[:4] == ["0s", "1µs", "2µs", "3µs"], labels
    assert len(set(labels)) == len(labels)


@given(st.floats(min_value=1e-9, max_value=1e8, allow_nan=False))
def test_ticks_are_distinct_few_and_cover_the_span(total: float) -> None:
    end, axis = ticks(total)
    labels = [label for _, label in axis]
    assert len(set(labels)) == len(labels), labels
    assert 2 <= len(axis) <= 6, labels
    assert labels[0] == "0s" and axis[0][0] == 0
    assert end >= total * (1 - 1e-9) and axis[-1][0] == pytest.approx(end)
    assert end < total * 2.5 + 1e-9  # the data fills at least 40 % of the axis


@pytest.mark.parametrize(("total", "labels"), [
    (3e-6, ["0s", "1µs", "2µs", "3µs"]),
    (0.25, ["0s", "50ms", "100ms", "150ms", "200ms", "250ms"]),
    (2.0, ["0s", "0.5s", "1s", "1.5s", "2s"]),
    (100, ["0s", "20s", "40s", "60s", "80s", "100s"]),
    (5400, ["0s", "30m", "1h", "1h30m"]),
    (7 * 3600, ["0s", "2h", "4h", "6h", "8h"]),
    (40 * 86400, ["0s", "10d", "20d", "30d", "40d"]),
])
def test_tick_labels_read_as_a_person_writes_them(total: float, labels: list[str]) -> None:
    assert [label for _, label in ticks(total)[1]] == labels


def test_elide_counts_cells_and_never_splits_a_character() -> None:
    assert elide("abc", 3) == "abc"
    assert elide("abcdef", 4) == "abc…"
    assert elide("進捗進捗", 5) == "進捗…"  # two cells each
    # A combining mark counts as a cell (renderers that do not shape give it one) and stays
    # with its base letter.
    assert elide("e\u0301" * 10, 4) == "e\u0301" + "…"


# Any character at all, lone surrogates and noncharacters included.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=80)


@settings(max_examples=300, deadline=None)
@example(names=["step\uffff", "\ufffe", "a\ud800b", "\ufdd0\U0010ffff"], task="t\uffff",
         namespace="\x00\x1b[31m")
@given(names=st.lists(ANY_TEXT, min_size=0, max_size=4), task=ANY_TEXT, namespace=ANY_TEXT)
def test_any_names_make_a_well_formed_svg(names: list[str], task: str,
                                          namespace: str) -> None:
    data = rows(types.SimpleNamespace(spans={
        name: agg(T0 + i, T0 + i + 1) for i, name in enumerate(names)}))
    text = svg(task, namespace, data)
    ET.fromstring(text.encode("utf-8"))  # expat refuses anything XML 1.0 forbids


def test_a_slow_pod_has_its_own_lane_in_orange() -> None:
    """Under each span name, one lane per pod; the pod whose mean span is
    well above its peers' is marked slow (orange in the SVG, "slow" in the terminal)."""
    data = rows(types.SimpleNamespace(spans=CASES["pods"]))
    step = next(r for r in data if r["name"] == "train_step")
    assert [lane["name"] for lane in step["pods"]] == [f"trainer-{i}" for i in range(4)]
    assert [lane["slow"] for lane in step["pods"]] == [False, False, True, False]
    root = ET.fromstring(chart(CASES["pods"]))
    ns = {"s": "http://www.w3.org/2000/svg"}
    labels = [g.findtext("s:title", namespaces=ns) for g in root.findall("s:g[@class='label']", ns)]
    assert labels[:5] == ["train_step", "trainer-0", "trainer-1", "trainer-2", "trainer-3"]
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "bar"]
    assert [b.get("fill") for b in bars[:5]] == ["#3b82c4", "#8fb8de", "#8fb8de", "#e8912d",
                                                 "#8fb8de"]
    stats = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
             if t.get("class") == "stats"]
    assert stats[3].endswith("(slow)") and "7 summaries from pods beyond the lanes" in stats


def test_one_pod_draws_no_lane_under_its_name() -> None:
    data = rows(types.SimpleNamespace(spans={"epoch": laned({"trainer-0": agg(T0, T0 + 9)})}))
    assert [lane["name"] for lane in data[0]["pods"]] == ["trainer-0"]  # in -o json
    root = ET.fromstring(svg("fit", "ml", data))
    assert len(root.findall("{http://www.w3.org/2000/svg}g[@class='label']")) == 1
