"""The status: a task's state written as its TaskFeedback status and read back (pure).

The encoder (with the byte budget), the strict decoder (its inverse, so a restart resumes
from the status), and the health judgments written beside the phase. It imports the engine
and the wire below it, never the view.
"""
