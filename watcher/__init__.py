"""tidings.watcher: fold the bus's Events into one durable TaskFeedback status per task.

Pieces, client-go style: ``reflector`` (list+watch from raw lines, relist rules), ``queue``
(work queue keyed by task, with delayed adds), ``store`` (states + pending events),
``delivery`` (events to their task's key), ``fold`` (the fold workers; the admission rule is
``schemas.engine.admission``, its reads ``checks``, the run ``runs``), ``senders`` (pod-label check
over a pod informer), ``coalesce``/``writer`` (coalesced status writes), ``health_clock``,
``leader`` (Lease), ``http`` (health, metrics, read API), ``controller`` (the wiring),
``app`` (the process).
"""
