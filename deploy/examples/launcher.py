"""A sample controller for the demo: owns its tasks' TaskFeedbacks and records lineage.

Usage (identity from the downward API, like any emitter):
  launcher.py own TASK                        pre-create TaskFeedback TASK, owned by this
                                              controller's pod; prints its uid for the pods
  launcher.py lineage APP POD=UID[:ROLE] ...  record which pods were spawned for APP
"""

from __future__ import annotations

import os
import sys

from tidings import emitter as tidings
from tidings.emitter.task import create_task_feedback
from tidings.schemas.wire.event import ObjectRef


def own(task: str) -> int:
    # The controller's own object: here its pod (a real controller passes its Job or CR).
    # The garbage collector deletes the TaskFeedback when that object is deleted.
    me = ObjectRef("v1", "Pod", os.environ["POD_NAME"], os.environ["POD_NAMESPACE"],
                   os.environ["POD_UID"])
    made = create_task_feedback(task, namespace=me.namespace, owner=me)
    print(made.uid)  # goes into the task pods' tidings.dev/task-uid annotation
    return 0


def lineage(app: str, pods: list[str]) -> int:
    for attempt, spec in enumerate(pods):
        name, _, rest = spec.partition("=")
        uid, _, role = rest.partition(":")
        tidings.pod_spawned(name, uid, app=app, role=role or "worker", attempt=attempt,
                            app_kind="Job", app_api_version="batch/v1")
    return 0 if tidings.flush(15) else 1


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    sys.exit(own(args[0]) if command == "own" else lineage(args[0], args[1:]))
