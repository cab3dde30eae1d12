"""A folded state as plain JSON data, field by field, for comparing what two readers rebuilt
(tests/unit/test_status_v2.py): dataclasses and named tuples by field, maps by key (sorted),
times as text, floats by their exact repr, the version vector as its text."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tidings.schemas.engine.version_vector import VersionVector


def canon(o: Any) -> Any:
    """``o`` as JSON data: the same for two states exactly when their fields are equal."""
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: canon(getattr(o, f.name)) for f in dataclasses.fields(o)}
    if isinstance(o, tuple) and hasattr(o, "_asdict"):
        return {k: canon(v) for k, v in o._asdict().items()}
    if isinstance(o, VersionVector):
        return o.to_text({})
    if isinstance(o, Mapping):
        return {(k if isinstance(k, str) else repr(k)): canon(v)
                for k, v in sorted(o.items(), key=lambda kv: repr(kv[0]))}
    if isinstance(o, tuple | list):
        return [canon(x) for x in o]
    if isinstance(o, datetime):
        return o.isoformat()
    if isinstance(o, timedelta):
        return o.total_seconds()
    if isinstance(o, float):
        return repr(o)
    return o


def subset_diff(recorded: Any, now: Any, path: str = "") -> list[str]:
    """Where ``now`` differs from ``recorded``, reading only what ``recorded`` holds (a field
    the state gained since it was recorded is not compared)."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        out: list[str] = []
        for k, v in recorded.items():
            if k not in now:
                out.append(f"{path}/{k}: missing")
            else:
                out += subset_diff(v, now[k], f"{path}/{k}")
        return out
    return [] if recorded == now else [f"{path}: {recorded!r} != {now!r}"]
