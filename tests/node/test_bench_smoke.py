"""The real node's benches run (``--smoke``, figures meaningless) on the suite's real node, so
none rots until someone wants its figures; tests/cluster runs the others. No timing asserted."""

from __future__ import annotations

import pytest

from tests.cluster.test_bench_smoke import BENCH, run_smoke
from tools.devcluster import ControlPlane
from tools.devnode import RealNode

SCRIPTS = sorted(p for p in BENCH.glob("bench_*.py") if "NEEDS_REAL_NODE" in p.read_text())


def test_a_real_node_bench_is_found() -> None:
    assert SCRIPTS, "no bench says NEEDS_REAL_NODE"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_real_node_bench_smoke(script: object, real_node: RealNode,
                               control_plane: ControlPlane) -> None:
    run_smoke(script, control_plane)  # type: ignore[arg-type]
