"""tidings.watcher: fold the bus's Events into one durable TaskFeedback status per task.

Pieces, client-go style: ``reflector`` (list+watch from raw lines, relist rules), ``queue``
(work queue keyed by task), ``store`` (states + pending events), ``senders`` (pod-label check
over a pod informer), ``coalesce``/``writer`` (coalesced status writes), ``leader`` (Lease),
``http`` (health, metrics, read API), ``controller`` (the wiring), ``app`` (the process).
"""
