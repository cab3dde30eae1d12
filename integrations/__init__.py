"""tidings.integrations: one-line reporting from the frameworks workloads train with.

Each framework is imported only by the module that integrates it (``tidings.integrations.
transformers``, ``.lightning``, ``.flytekit``); importing this package imports none of them.
"""
