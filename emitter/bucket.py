"""The per-pod API budget (``burst`` creates at once, then ``rate`` per second): the pacing
kit's one token bucket (``tidings.kube.flowcontrol``), named here for the emitter's sender."""

from tidings.kube.flowcontrol import TokenBucket

__all__ = ["TokenBucket"]
