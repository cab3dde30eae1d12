"""The reflector's relist rules, against a scripted fake API (no network)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tidings.kube import KubeError
from tidings.kube.flowcontrol import Backoff
from tidings.schemas.wire.event import WatchItem, parse_watch_line
from tidings.watcher.reflector import Reflector


class Reads:
    """A streaming response whose socket reads are scripted: each a list of lines."""

    chunked = False

    def __init__(self, reads: list[list[bytes]]) -> None:
        self.reads = [b"".join(line + b"\n" for line in r) for r in reads]

    def read1(self, n: int) -> bytes:
        return self.reads.pop(0) if self.reads else b""

    def release_conn(self) -> None: ...
    def close(self) -> None: ...
    def shutdown(self) -> None: ...


class Script:
    """Lists answer with an RV; each watch call pops the next scripted stream (a list of lines,
    or an exception). When the script runs out, the reflector is stopped."""

    def __init__(self, streams: list[Any], stop: Callable[[], None]) -> None:
        self.streams = streams
        self.lists = 0
        self.watch_rvs: list[str] = []
        self.stop = stop

    def get(self, path: str, query: Any = None, **kw: Any) -> Any:
        self.lists += 1
        return {"metadata": {"resourceVersion": f"L{self.lists}"}, "items": []}

    def stream(self, path: str, query: list[tuple[str, str]], *, timeout: Any) -> Any:
        self.watch_rvs.append(dict(query)["resourceVersion"])
        if not self.streams:
            self.stop()
            return Reads([])
        nxt = self.streams.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        # A scripted stream of lists is one socket read per list; of lines, a read per line.
        return Reads([x if isinstance(x, list) else [x] for x in nxt])


class Src:
    resource = "events"

    def __init__(self) -> None:
        self.items: list[WatchItem] = []

    def list_begin(self) -> None: ...
    def list_page(self, items: list[Any]) -> None: ...
    def list_done(self, rv: str) -> None: ...

    def watch_line(self, line: bytes) -> WatchItem:
        item = parse_watch_line(line)
        self.items.append(item)
        return item


def line(wtype: str, rv: str, **obj: Any) -> bytes:
    return orjson.dumps({"type": wtype, "object": {"metadata": {"resourceVersion": rv}, **obj}})


def run_until_stopped(r: Reflector) -> None:
    """``r.run()`` on a thread of its own, which the script's last stream stops."""
    t = threading.Thread(target=r.run)
    t.start()
    t.join(10)
    assert not t.is_alive()


def run(streams: list[Any], short_watch: float = 1.0) -> tuple[Script, Src, list[str]]:
    relists: list[str] = []
    src = Src()
    holder: dict[str, Reflector] = {}
    script = Script(streams, lambda: holder["r"].stop())
    r = Reflector(script, "/apis/events.k8s.io/v1/events", [], src,  # type: ignore[arg-type]
                  on_relist=relists.append, short_watch=short_watch,
                  backoff=Backoff(base=0.001, cap=0.002))
    holder["r"] = r
    run_until_stopped(r)
    return script, src, relists


def test_resume_from_last_rv_including_bookmarks() -> None:
    script, _src, relists = run([
        [line("ADDED", "5"), line("BOOKMARK", "9")],
        [line("ADDED", "12")],
    ], short_watch=0.0)
    assert relists == ["start"]
    assert script.watch_rvs[:3] == ["L1", "9", "12"]


def test_410_error_event_relists() -> None:
    script, _, relists = run([[line("ERROR", "", code=410, message="too old")]])
    assert relists == ["start", "gone"]
    assert script.watch_rvs[:2] == ["L1", "L2"]


def test_http_410_relists() -> None:
    _, _, relists = run([KubeError(410, "Gone")])
    assert relists == ["start", "gone"]


def test_empty_immediate_close_is_a_stale_rv() -> None:
    script, _, relists = run([[]], short_watch=5.0)
    assert relists == ["start", "short_watch"]
    assert script.watch_rvs[:2] == ["L1", "L2"]


def test_undecodable_line_relists() -> None:
    _, _, relists = run([[line("ADDED", "3"), b"{not json"]], short_watch=0.0)
    assert relists == ["start", "decode_error"]


def test_connection_error_resumes_without_relist() -> None:
    script, _, relists = run([[line("ADDED", "7")], KubeError(0, "refused"), [line("ADDED", "8")]],
                             short_watch=0.0)
    assert relists == ["start"]
    assert script.watch_rvs[:4] == ["L1", "7", "7", "8"]


def test_backoff_is_capped_with_jitter() -> None:
    b = Backoff(base=0.8, cap=30.0, jitter=0.5, rng=lambda: 1.0)
    delays = [b.next() for _ in range(10)]
    assert delays[0] == pytest.approx(1.2)
    assert max(delays) == 30.0
    b.reset()
    assert b.next() == pytest.approx(1.2)


class BatchSrc(Src):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def watch_lines(self, lines: list[bytes]) -> list[WatchItem]:
        self.batches.append(len(lines))
        out = []
        for raw in lines:
            out.append(self.watch_line(raw))
            if out[-1].type in ("ERROR", ""):
                break
        return out


def test_a_batched_source_gets_each_read_whole_and_an_error_mid_read_still_relists() -> None:
    relists: list[str] = []
    src = BatchSrc()
    holder: dict[str, Reflector] = {}
    script = Script([[[line("BOOKMARK", "5"), line("BOOKMARK", "6")],
                      [line("BOOKMARK", "7"), line("ERROR", "", code=410), line("BOOKMARK", "9")]],
                     [[line("BOOKMARK", "20")]]], lambda: holder["r"].stop())
    r = Reflector(script, "/x", [], src, on_relist=relists.append,  # type: ignore[arg-type]
                  backoff=Backoff(base=0.001, cap=0.002))
    holder["r"] = r
    run_until_stopped(r)
    assert src.batches == [2, 3, 1]
    assert [i.resource_version for i in src.items] == ["5", "6", "7", "", "20"]
    assert relists == ["start", "gone"]


def test_a_metadata_only_loop_asks_for_the_metadata_alone_in_both_list_and_watch() -> None:
    """A list's answer is a PartialObjectMetadataList, a watch's objects PartialObjectMetadata:
    one Accept offering both makes the API server's watch send nothing at all."""
    from tidings.kube import ListWatch, WatchLines
    from tidings.kube.client import METADATA_LIST, METADATA_ONLY

    asked: list[tuple[str, str | None]] = []

    class Meta:
        def request(self, method: str, path: str, *, query: Any = None, timeout: Any = None,
                    accept: str | None = None) -> Any:
            asked.append(("list", accept))
            return {"metadata": {"resourceVersion": "1"}, "items": []}

        def stream(self, path: str, query: Any, *, timeout: Any,
                   accept: str | None = None) -> Any:
            asked.append(("watch", accept))
            return Reads([[line("ADDED", "2")]])

    lw = ListWatch(Meta(), "/apis/tidings.dev/v1alpha1/taskfeedbacks",  # type: ignore[arg-type]
                   metadata_only=True)
    for change in lw:
        if isinstance(change, WatchLines):
            lw.stop()
    assert asked == [("list", METADATA_LIST), ("watch", METADATA_ONLY)]
