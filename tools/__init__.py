"""Checkout-only tools, never shipped in the wheel: the local control plane (devcluster.py,
behind `tidings dev`), the type-check runner (typecheck.py) and the binaries' builds."""
