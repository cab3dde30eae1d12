"""The engine: the fold of a task's facts and observations into its state (pure).

The version vector and dedup, the apply of each kind, spans, workers and the roster, the
completion rule, the fold of what pods' and platform objects' own objects say, admission and
lineage. It imports only the wire below it, never status or view.
"""
