"""The view: what people read of a task (pure, the top layer).

The list row that `tidings list` and `get` print (``summary``, light on purpose) and the
model of one task that `state` and the page render (``model``). It may import every layer
below it.
"""
