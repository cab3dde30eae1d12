"""A sample controller for the demo: records which pods it spawned for an app (lineage).

Usage: launcher.py APP POD_NAME=POD_UID[:ROLE] ...  (identity from the downward API, like
any emitter; the events are about the app, so the CLI finds exactly these pods later).
"""

from __future__ import annotations

import sys

from tidings import emitter as tidings


def main(app: str, pods: list[str]) -> int:
    for attempt, spec in enumerate(pods):
        name, _, rest = spec.partition("=")
        uid, _, role = rest.partition(":")
        tidings.pod_spawned(name, uid, app=app, role=role or "worker", attempt=attempt,
                            app_kind="Job", app_api_version="batch/v1")
    return 0 if tidings.flush(15) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
