"""Headless Chromium for the page's tests, its benchmark and its picture in docs/ui.md: Debian's
`chromium` (`make debs`), driven by playwright through its executable_path, since playwright
cannot download a browser of its own here. Checkout only."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium dials out at start, and a closed network
# refuses it; each launch gets a fresh profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def browser(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A playwright browser context on a fresh profile; closed on exit."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport={"width": width, "height": height})
        try:
            yield context
        finally:
            context.close()
