"""Checkout-only tools, never shipped in the wheel: the local control plane (devcluster.py,
behind `tidings dev`) and the binaries' builds."""
