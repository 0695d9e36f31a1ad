"""The session: this process's node handle in a cluster and the bracket
around every call of the C core that uses it.

A :class:`pydsm.Cluster` owns one session and hands it to each of its parts
(``c.memory``, ``c.own``, ``c.compact``, ``c.mheap``, ``c.workloads``); a part
reaches the C core only through it, so that :meth:`Cluster.close` can wait
for the calls in flight before it frees the node.
"""
from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from . import _lib
from .errors import ClusterClosed, InvalidArgument, NoPeer


def _no_log(node: int) -> str:
    return ""


class Session:
    """The node handle, the call bracket, the cluster's ranks and the C
    handles of the workloads it started.

    Attributes set by the :class:`pydsm.Cluster` that owns it:
    ``coordinator`` (for messages), ``mode`` (``"local"`` or
    ``"connect"``), ``progress`` (the daemons' progress mode) and
    ``daemon_log`` (a local daemon's log by rank; empty text otherwise).
    """

    def __init__(self) -> None:
        self.node: Any = None
        self.closed = False
        self.coordinator = ""
        self.mode = "local"
        self.progress = "blocking"
        self.op_timeout_ms = 5000
        self.ranks: List[int] = []
        self.daemon_log: Callable[[int], str] = _no_log
        #: the C handles of started workloads by id (joined ones removed)
        self.tasks: Dict[int, Any] = {}
        self.task_ids = itertools.count(1)
        #: the extension's _pydsm_fetch_add (the one-word fast path), set at join
        self.fetch_add_c: Any = None
        self._lock = threading.Condition()
        # One marker per call of the C core in flight (see begin): list
        # append/pop are atomic, so the fast path takes no lock.
        self._calls: List[None] = []

    # ---------------------------------------------------------- the bracket
    def ensure_open(self) -> None:
        if self.closed:
            raise ClusterClosed(f"the cluster at {self.coordinator or '?'} is closed")
        if self.node is None:
            raise ClusterClosed("the cluster is not started")

    def begin(self) -> Any:
        """The open node, counted as in use (close() waits for it) until
        :meth:`end`. Lock-free: the marker goes in before ``closed`` is read,
        and :meth:`drain` sets ``closed`` before it waits for the markers, so
        a call either sees the session closed or is waited for."""
        self._calls.append(None)
        node = self.node
        if self.closed or node is None:
            self._calls.pop()
            self.ensure_open()
        return node

    def end(self) -> None:
        self._calls.pop()
        if self.closed and not self._calls:
            self.notify_drained()

    def notify_drained(self) -> None:
        """Wake :meth:`drain`, which waits for the calls in flight."""
        with self._lock:
            self._lock.notify_all()

    @contextmanager
    def in_use(self) -> Iterator[Any]:
        """The open node, counted as in use while the block calls the C core."""
        node = self.begin()
        try:
            yield node
        finally:
            self.end()

    def fetch_add1(self, addr: int, val: int) -> int:
        """``dsm_fetch_add`` on a checked, aligned address: the driver's
        one-word fast path, one C call that returns the old value inside the
        bracket, with no out-parameter to allocate."""
        old: int = self.word1(self.fetch_add_c, addr, (val,), "fetch_add")
        return old

    def word1(self, fn: Any, addr: int, args: Tuple[Any, ...] = (), op: str = "read",
              status: bool = False) -> Any:
        """One call of the extension's one-word fast paths on a checked,
        aligned address, inside the bracket: ``fn(node, addr, *args)``
        returns the word, UINT64_MAX or NaN asking for the status
        (``_pydsm_fetch_add``, ``_pydsm_read_u64``, ``_pydsm_read_f64``),
        or, with ``status``, its status (``_pydsm_write_u64``,
        ``_pydsm_write_f64``; None is returned). ``op`` names the operation
        in errors."""
        calls = self._calls
        calls.append(None)
        try:
            node = self.node
            if self.closed or node is None:
                self.ensure_open()   # raises ClusterClosed
            out = fn(node, addr, *args)
        finally:
            calls.pop()
        if self.closed and not calls:
            self.notify_drained()
        if status:
            st = out
        elif out == (1 << 64) - 1 or out != out:   # the failure marker (or that very value)
            st = int(_lib.ext().lib._pydsm_fetch_add_status())
        else:
            return out
        if st < 0:
            _lib.check(st, "" if op == "fetch_add" else f"cannot {op} 8 bytes", node=node_of(addr),
                       address=addr, op=op)
        return None if status else out

    def drain(self, timeout: float) -> Tuple[bool, bool]:
        """Mark the session closed and wait at most ``timeout`` seconds for
        the calls in flight. Returns (was it closed already, did calls stay
        in flight)."""
        with self._lock:
            if self.closed:
                return True, False
            self.closed = True
            deadline = time.monotonic() + timeout
            while self._calls and time.monotonic() < deadline:
                self._lock.wait(0.01)
            return False, len(self._calls) > 0

    # ------------------------------------------------------------- members
    def live_nodes(self) -> List[int]:
        """Daemon ranks that are live members right now."""
        e = _lib.ext()
        cap = e.lib.DSM_MAX_RANKS
        buf = e.ffi.new("uint32_t[]", cap)
        with self.in_use() as n:
            count = e.lib.dsm_node_daemons(n, buf, cap)
        return [int(buf[i]) for i in range(min(count, cap))]

    def check_node(self, node: Any) -> int:
        """``node`` as a daemon rank of this cluster, or NoPeer."""
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)):
            raise InvalidArgument(f"node must be an int (a daemon rank), not {node!r}")
        rank = int(node)
        if rank not in self.ranks:
            if self.node is not None and not self.closed and 0 <= rank < _lib.ext().lib.DSM_MAX_DAEMONS:
                self.ranks = sorted(set(self.ranks) | set(self.live_nodes()))
            if rank not in self.ranks:
                raise NoPeer(f"no node {rank} in this cluster (nodes: {self.ranks})", node=rank)
        return rank

    def partition_size(self, node: int) -> int:
        """Bytes of memory node ``node`` serves."""
        node = self.check_node(node)
        with self.in_use() as n:
            size = int(_lib.ext().lib.dsm_heap_partition_size(n, node))
        return size

    def stats(self, node: Optional[int] = None) -> Dict[str, int]:
        """Counters of daemon ``node`` (or of this process when None)."""
        from .workloads import stat_fields

        out = self.stats_record(node)
        return {f: int(getattr(out, f)) for f in stat_fields()}

    def stats_record(self, node: Optional[int] = None) -> Any:
        """The whole ``dsm_stats_t`` behind :meth:`stats`, per-handler
        message counts included."""
        e = _lib.ext()
        out = e.ffi.new("dsm_stats_t *")
        with self.in_use() as n:
            if node is None:
                e.lib.dsm_node_stats(n, out)
                st = 0
            else:
                st = e.lib.dsm_node_peer_stats(n, self.check_node(node), out)
        _lib.check(st, "cannot read stats", node=node, op="stats")
        return out

    def host_load(self, placement: Any, nodes: int) -> Tuple[int, int]:
        """(busy threads, cores) of a run of ``nodes`` nodes on this host, for
        a local cluster (its daemons share this host); (0, 0) otherwise."""
        if self.mode != "local":
            return 0, 0
        from .result import busy_threads, host_cores
        return busy_threads(placement, nodes, self.progress), host_cores()


def node_of(addr: int) -> int:
    """The node (rank) part of a global address (heap.h's dsm_gaddr_node)."""
    return int(_lib.ext().lib.dsm_gaddr_node(addr))
