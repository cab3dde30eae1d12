"""Fixtures the CLI's and the page's cluster tests share (tests/conftest.py has the control
plane): the TaskFeedback CRD, installed once a session, and a pool of `tidings` processes
stopped at each test's teardown. A module that needs another ``crd`` defines its own."""

from __future__ import annotations

import pytest

from tests.cluster.support_cli import install_crd, proc_pool

crd = pytest.fixture(scope="session", name="crd")(install_crd)
proc_factory = pytest.fixture(name="proc_factory")(proc_pool)
