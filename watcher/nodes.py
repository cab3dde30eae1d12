"""The nodes the tasks' pods run on, read by one list+watch of the Nodes, of which only what
is needed is kept: the nodes whose ``Ready`` condition is False or Unknown (the node
lifecycle controller sets Unknown once a kubelet stops reporting, after its grace period).
A pod still Running on such a node is a worker on a lost node (``Senders.on_lost_nodes``):
its pod object says Running until the taint eviction controller removes it, and only the
node says why it stopped speaking. A change of a node's readiness tells ``on_change``, which
wakes the tasks of the pods on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tidings.kube import KubeError
from tidings.kube.objects import KubeObject
from tidings.schemas.engine.observed import NodeLoss, node_loss
from tidings.schemas.wire.event import WatchItem

from .reflector import object_line

log = logging.getLogger("tidings.watcher.nodes")


class Nodes:
    """Thread-safe: the nodes' reflector puts, the fold workers ask ``lost``."""

    def __init__(self, on_change: Callable[[str], None] = lambda node: None) -> None:
        self.on_change = on_change
        self._lock = threading.Lock()
        self._lost: dict[str, NodeLoss] = {}  # name -> why it is not ready (ready: absent)

    def lost(self, node: str) -> NodeLoss | None:
        """Why ``node`` is not Ready now; None while it is (or is not known)."""
        with self._lock:
            return self._lost.get(node)

    def put(self, name: str, loss: NodeLoss | None) -> None:
        with self._lock:
            before = self._lost.get(name)
            if loss is None:
                self._lost.pop(name, None)
            else:
                self._lost[name] = loss
        if (before is None) != (loss is None):
            self.on_change(name)

    def source(self) -> NodeSource:
        return NodeSource(self)


class NodeSource:
    """The reflector source of the Nodes (cluster-scoped). A relist forgets the nodes it no
    longer lists; a watcher that may not read Nodes (403) says so once and judges none."""

    resource = "nodes"

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self._listed: set[str] = set()
        self._mine: set[str] = set()
        self._said = False

    def list_begin(self) -> None:
        self._listed = set()

    def list_page(self, items: list[KubeObject]) -> None:
        for obj in items:
            name = ((obj.get("metadata") or {}).get("name")) if isinstance(obj, dict) else None
            if isinstance(name, str):
                self._listed.add(name)
                self.nodes.put(name, node_loss(obj))

    def list_done(self, resource_version: str) -> None:
        for name in self._mine - self._listed:
            self.nodes.put(name, None)
        self._mine, self._listed = set(self._listed), set()  # (a copy is half the size)

    def watch_line(self, line: bytes) -> WatchItem:
        wtype, obj, item = object_line(line)
        name = ((obj.get("metadata") or {}).get("name")) if isinstance(obj, dict) else None
        if isinstance(name, str) and wtype in ("ADDED", "MODIFIED"):
            self._mine.add(name)
            self.nodes.put(name, node_loss(obj))
        elif isinstance(name, str) and wtype == "DELETED":
            self._mine.discard(name)
            self.nodes.put(name, None)  # (its pods are deleted with it, and say so)
        return item

    def quiet(self, err: Exception) -> bool:
        if isinstance(err, KubeError) and (err.not_found or err.denied):
            if not self._said:
                log.info("nodes not readable here (%s): no worker is called lost with its "
                         "node", err)
                self._said = True
            return True
        return False
