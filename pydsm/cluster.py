"""Clusters: a local one (dsmd processes on this host, the coordinator inside
this process) or a deployed one (connect to its coordinator). Either way this
process joins the fabric as a client member, so it can allocate, read, write
and run atomics on global memory, and run C workloads on the nodes.

:class:`Cluster` is the façade; its parts live by concept in
:mod:`pydsm.daemons` (the coordinator and dsmd processes of a local cluster),
:mod:`pydsm.memory` (GlobalBuffer, alloc/read/write/atomics) and
:mod:`pydsm.workloads` (Placement, Task, run, the argument/result text).
"""
from __future__ import annotations

import atexit
import itertools
import os
import secrets as _secrets
import subprocess
import tempfile
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np

from . import _lib
from .daemons import DaemonSupervisor
from .errors import ClusterClosed, InvalidArgument, NoPeer, Timeout, Unsupported
from .memory import Address, GlobalBuffer, MemoryAPI
from .own import OwnAPI
from .units import format_size, parse_size
from .workloads import NodeTask, Placement, Task, WorkloadsAPI, decode_result, encode_args, stat_fields

__all__ = ["Cluster", "GlobalBuffer", "Placement", "Task", "encode_args", "decode_result",
           "Address", "FABRICS", "stat_fields"]

FABRICS = ("shm", "tcp", "verbs", "auto")
_cluster_ids = itertools.count(1)
_live: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for c in list(_live):
        try:
            c.close()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass


atexit.register(_close_all_at_exit)


def _set_driver_log_level(level: int) -> None:
    """libdsm's log level in this process (the coordinator and the driver's
    node log here); $DSM_LOG_LEVEL, when set, wins."""
    if "DSM_LOG_LEVEL" not in os.environ:
        _lib.ext().lib.dsm_set_log_level(int(level))


def _check_fabric(fabric: str) -> None:
    """Refuse an unknown fabric, and verbs on a machine without RDMA devices,
    at once (instead of UCX's lines and a join timeout)."""
    if fabric not in FABRICS:
        raise InvalidArgument(f"fabric must be one of {FABRICS}, not {fabric!r}")
    if fabric == "verbs":
        from .info import verbs_unavailable

        reason = verbs_unavailable()
        if reason:
            raise Unsupported(reason)


class Cluster(DaemonSupervisor, MemoryAPI, OwnAPI, WorkloadsAPI):
    """A running cluster and this process's membership in it.

    Create one with :meth:`local` or :meth:`connect`; use it as a context
    manager (or call :meth:`close`). Nodes are named by their daemon rank
    (0..N-1 for a local cluster); :attr:`nodes` lists them.
    """

    def __init__(self, *, _token: object = None) -> None:
        if _token is not _PRIVATE:
            raise TypeError("use Cluster.local(...) or Cluster.connect(...)")
        self.id = next(_cluster_ids)
        self.coordinator = ""
        self.secret = ""
        self.fabric = "auto"
        self.partition = 0
        self.mode = "local"
        self.closed = False
        self.processes: List[subprocess.Popen] = []
        self._logs: List[str] = []
        self._logdir: Optional[tempfile.TemporaryDirectory] = None
        self._coord: Any = None
        self._node: Any = None
        self._keep: List[Any] = []
        self._ranks: List[int] = []
        self._lock = threading.Condition()
        # One marker per call of the C core in flight (see _begin_call):
        # list.append/pop are atomic, so the fast path takes no lock.
        self._calls: List[None] = []
        self._fetch_add_c: Any = None   # the extension's _pydsm_fetch_add, set when the node starts
        self._tasks: Dict[int, Any] = {}
        self._task_ids = itertools.count(1)
        self.op_timeout_ms = 5000
        #: the Placement whose delegation runtime every daemon attached (Cluster.local), or None
        self.placement: Optional[Placement] = None

    # ------------------------------------------------------------------ start
    @classmethod
    def local(cls, nodes: int = 4, fabric: str = "shm", partition: Union[int, str] = "256MiB",
              secret: Optional[str] = None, *, progress: str = "auto",
              heartbeat_ms: int = 250, peer_timeout_ms: int = 3000, op_timeout_ms: int = 5000,
              start_timeout: float = 30.0, log_level: int = 1, net_device: Optional[str] = None,
              plugin: Optional[str] = None, dsmd: Optional[str] = None,
              placement: Optional[Placement] = None) -> "Cluster":
        """Start ``nodes`` dsmd processes on this host and join them.

        Args:
            nodes: number of daemons (ranks 0..nodes-1), 1..128.
            fabric: ``"shm"`` (one-sided access between processes) or ``"tcp"``
                (over loopback), or ``"verbs"``/``"auto"``.
            partition: memory each node serves, bytes or text like ``"64MiB"``.
            secret: cluster secret; a random one when None.
            progress: how each daemon's progress thread waits for messages.
                ``"auto"`` (default): ``"hybrid"`` over tcp, ``"blocking"``
                otherwise. ``"blocking"`` sleeps until a message comes (good
                on few cores; over tcp every one-sided operation then wakes
                the target). ``"hybrid"``: blocking, but a daemon polls for
                100 µs after each message before it sleeps, so a driver's
                next operation costs it no wake-up (single operations from
                Python over tcp run about 3x faster); a daemon that finds
                itself preempted while polling (more busy threads than
                cores) stops polling for 100 ms. ``"busy"`` polls always.
            peer_timeout_ms: silence before a node is declared dead.
            op_timeout_ms: bound on each blocking operation.
            start_timeout: seconds to wait for every daemon to join.
            log_level: dsmd's log level (0 errors .. 3 debug), to its stderr log.
            net_device: network device for tcp/verbs (default ``lo`` for tcp).
            plugin: a ``.so`` with extra workloads every daemon loads.
            dsmd: path of the daemon (default: the one shipped in the package).
            placement: a :class:`Placement` whose ``threads`` and ``trustees``
                size a delegation runtime attached to every daemon (``dsmd
                --deleg-threads``), so that delegation workloads run with
                trustees on every node (``c.run("sssp", placement)``).
        """
        if not isinstance(nodes, (int, np.integer)) or isinstance(nodes, bool) or not 1 <= nodes <= 128:
            raise InvalidArgument(f"nodes must be an int in 1..128, not {nodes!r}")
        _check_fabric(fabric)
        if progress not in ("auto", "blocking", "busy", "hybrid"):
            raise InvalidArgument(f"progress must be 'auto', 'blocking', 'busy' or 'hybrid', not {progress!r}")
        try:
            part = parse_size(partition)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if part < (1 << 20):
            raise InvalidArgument(f"partition must be at least 1MiB, not {format_size(part)}")
        if placement is not None and not isinstance(placement, Placement):
            raise InvalidArgument(f"placement must be a Placement, not {placement!r}")
        if placement is not None and placement.trustees == "dedicated" and placement.threads < 2:
            raise InvalidArgument("Placement(trustees='dedicated') needs threads >= 2 (one runs the workload)")
        dsmd = dsmd or _lib.dsmd_path()
        _set_driver_log_level(log_level)

        self = cls(_token=_PRIVATE)
        self.mode = "local"
        self.fabric = fabric
        self.placement = placement
        self.progress = progress
        self.partition = part
        self.secret = secret or _secrets.token_hex(16)
        self.op_timeout_ms = op_timeout_ms
        if net_device is None and fabric == "tcp":
            net_device = "lo"
        try:
            # 1. The coordinator lives in this process.
            self._start_coordinator(fabric, peer_timeout_ms)
            _live.add(self)
            # 2. The daemons.
            self._start_daemons(dsmd, nodes, fabric, part, progress, heartbeat_ms, peer_timeout_ms,
                                op_timeout_ms, log_level, net_device, plugin, placement)
            # 3. This process joins as a client and waits for every daemon.
            self._join(fabric, net_device, peer_timeout_ms, op_timeout_ms, heartbeat_ms,
                       join_timeout_ms=int(start_timeout * 1000))
            self._wait_daemons(nodes, start_timeout)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def connect(cls, coordinator: str, secret: str, *, fabric: str = "auto",
                net_device: Optional[str] = None, nodes: Optional[int] = None,
                timeout: float = 30.0, peer_timeout_ms: int = 3000,
                op_timeout_ms: int = 5000, log_level: int = 1) -> "Cluster":
        """Join a deployed cluster through its coordinator ``HOST:PORT``.

        ``nodes``: wait until at least this many daemons are up (default 1).
        A wrong secret raises :class:`pydsm.AuthError`.
        """
        if not isinstance(coordinator, str) or ":" not in coordinator:
            raise InvalidArgument(f"coordinator must be 'HOST:PORT', not {coordinator!r}")
        if not secret:
            raise InvalidArgument("a cluster secret is required")
        _check_fabric(fabric)
        _set_driver_log_level(log_level)
        self = cls(_token=_PRIVATE)
        self.mode = "connect"
        self.coordinator = coordinator
        self.secret = secret
        self.fabric = fabric
        self.op_timeout_ms = op_timeout_ms
        if net_device is None and fabric == "tcp" and coordinator.split(":")[0] in ("127.0.0.1", "localhost"):
            net_device = "lo"
        try:
            _live.add(self)
            self._join(fabric, net_device, peer_timeout_ms, op_timeout_ms, 0,
                       join_timeout_ms=int(timeout * 1000))
            self._wait_daemons(nodes or 1, timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _join(self, fabric: str, net_device: Optional[str], peer_timeout_ms: int,
              op_timeout_ms: int, heartbeat_ms: int, join_timeout_ms: int) -> None:
        e = _lib.ext()
        ffi, lib = e.ffi, e.lib
        cfg = ffi.new("dsm_node_config_t *")
        lib.dsm_node_config_init(cfg)
        coord, sec, dev = _lib.cstr(self.coordinator), _lib.cstr(self.secret), _lib.cstr(net_device)
        self._keep += [coord, sec, dev]
        cfg.coordinator, cfg.secret = coord, sec
        cfg.kind = lib.DSM_MEMBER_CLIENT
        cfg.rank = lib.DSM_RANK_ANY
        ptrans = ffi.new("dsm_transport_t *")
        _lib.check(lib.dsm_transport_parse(fabric.encode(), ptrans), f"unknown fabric {fabric!r}")
        cfg.transport = ptrans[0]
        cfg.progress = lib.DSM_PROGRESS_BLOCKING
        cfg.net_device = dev
        cfg.partition_size = 0
        cfg.peer_timeout_ms = peer_timeout_ms
        cfg.op_timeout_ms = op_timeout_ms
        cfg.heartbeat_ms = heartbeat_ms
        cfg.join_timeout_ms = join_timeout_ms
        pnode = ffi.new("dsm_node_t **")
        lib.dsm_clear_last_error()
        st = lib.dsm_start(cfg, pnode)
        if st < 0:
            why = ffi.string(lib.dsm_last_error()).decode(errors="replace")  # e.g. the coordinator's reason
            raise _lib.make_error(st, f"cannot join the cluster at {self.coordinator}" +
                                  (f": {why}" if why else "") + self._daemon_logs_hint(), op="join")
        self._node = pnode[0]
        self._fetch_add_c = lib._pydsm_fetch_add
        # "auto" resolves to the transport the coordinator names, if it does.
        self.fabric = ffi.string(lib.dsm_transport_name(lib.dsm_node_config(self._node).transport)).decode()

    def _wait_daemons(self, count: int, timeout: float) -> None:
        lib = _lib.ext().lib
        deadline = time.monotonic() + timeout
        while True:
            self._check_processes()
            st = lib.dsm_node_wait_daemons(self._node, count, 200)
            if st == 0:
                break
            if st != lib.DSM_ERR_TIMEOUT:
                _lib.check(st, "waiting for the daemons" + self._daemon_logs_hint(), op="wait_daemons")
            if time.monotonic() > deadline:
                up = self.live_nodes()
                raise Timeout(f"only {len(up)} of {count} daemons joined within {timeout:.0f} s "
                              f"(up: {up})" + self._daemon_logs_hint(), op="start")
        self._ranks = self.live_nodes()

    # ------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - depends on GC timing
        try:
            if not self.closed:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._ranks)} nodes"
        return f"<pydsm.Cluster {self.mode} {self.fabric} {self.coordinator} {state}>"

    def close(self, timeout: float = 5.0) -> None:
        """Leave the cluster; for a local one stop and reap every dsmd.

        Idempotent. Operations in flight in other threads finish (bounded by
        the op timeout) before the node is torn down."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            deadline = time.monotonic() + self.op_timeout_ms / 1000 + 1
            while self._calls and time.monotonic() < deadline:
                self._lock.wait(0.01)
            stuck = len(self._calls) > 0
        lib = _lib.ext().lib if (self._node is not None or self._coord is not None) else None
        tasks = list(self._tasks.values())
        self._tasks.clear()
        # Ask the workloads still running to stop (they poll their stop
        # flag), and give them a moment, so that a connected cluster's
        # daemons are left idle and a local one stops promptly.
        if tasks and lib is not None:
            for task in tasks:
                lib.dsm_task_cancel(task)
            grace = time.monotonic() + min(timeout, 2.0)
            pending = list(tasks)
            while pending and time.monotonic() < grace:
                pending = [t for t in pending if lib.dsm_join(t, _lib.ext().ffi.NULL, 0, _lib.ext().ffi.NULL, 50)
                           == lib.DSM_ERR_TIMEOUT]
            tasks = pending
        # Stop the daemons first when tasks are still running on them, so
        # those tasks end (their target left) before the node goes away.
        if tasks:
            self._stop_coordinator()
        for task in tasks:
            if lib.dsm_join(task, _lib.ext().ffi.NULL, 0, _lib.ext().ffi.NULL, int(timeout * 1000)) == lib.DSM_ERR_TIMEOUT:
                stuck = True
        if self._node is not None:
            if not stuck:  # never free a node that a C call may still be using
                lib.dsm_node_destroy(self._node)
            self._node = None
        self._stop_coordinator()
        self._reap(timeout)
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None
        _live.discard(self)

    # ------------------------------------------------------------ membership
    @property
    def nodes(self) -> List[int]:
        """Daemon ranks of the cluster as started (dead ones included)."""
        return list(self._ranks)

    def __len__(self) -> int:
        return len(self._ranks)

    @property
    def rank(self) -> int:
        """This process's (client) rank."""
        self._ensure_open()
        return int(_lib.ext().lib.dsm_node_rank(self._node))

    def live_nodes(self) -> List[int]:
        """Daemon ranks that are live members right now."""
        self._ensure_open()
        e = _lib.ext()
        cap = e.lib.DSM_MAX_RANKS
        buf = e.ffi.new("uint32_t[]", cap)
        n = e.lib.dsm_node_daemons(self._node, buf, cap)
        return [int(buf[i]) for i in range(min(n, cap))]

    def node_alive(self, node: int) -> bool:
        """True if daemon ``node`` is connected and alive."""
        self._ensure_open()
        return _lib.ext().lib.dsm_node_peer_state(self._node, self._check_node(node)) == 0

    def partition_size(self, node: int) -> int:
        """Bytes of memory node ``node`` serves."""
        self._ensure_open()
        return int(_lib.ext().lib.dsm_heap_partition_size(self._node, self._check_node(node)))

    def corm_store(self, node: int = 0) -> Any:
        """Daemon ``node``'s CoRM store (:class:`pydsm.corm.CormStore`)."""
        from .corm import CormStore
        self._ensure_open()
        return CormStore(self, node)

    def connection_info(self) -> Dict[str, str]:
        """How another process joins this cluster (pydsm.Cluster.connect)."""
        return {"coordinator": self.coordinator, "secret": self.secret, "fabric": self.fabric}

    # ---------------------------------------------------------------- guards
    def _ensure_open(self) -> None:
        if self.closed:
            raise ClusterClosed(f"the cluster at {self.coordinator or '?'} is closed")
        if self._node is None:
            raise ClusterClosed("the cluster is not started")

    def _begin_call(self) -> Any:
        """The open node, counted as in use (close() waits for it) until
        :meth:`_end_call`: the bracket of every call of the C core. Lock-free:
        the marker goes in before ``closed`` is read, and close() sets
        ``closed`` before it waits for the markers to drain, so a call either
        sees the cluster closed or is waited for."""
        self._calls.append(None)
        node = self._node
        if self.closed or node is None:
            self._calls.pop()
            self._ensure_open()
        return node

    def _end_call(self) -> None:
        self._calls.pop()
        if self.closed and not self._calls:
            self._end_call_notify()

    def _end_call_notify(self) -> None:
        """Wake close(), which waits for the calls in flight to drain."""
        with self._lock:
            self._lock.notify_all()

    @contextmanager
    def _node_in_use(self) -> Iterator[Any]:
        """The open node, counted as in use (close() waits for it) while the
        block runs a call of the C core."""
        node = self._begin_call()
        try:
            yield node
        finally:
            self._end_call()

    def _host_load(self, placement: Any, nodes: int) -> "tuple[int, int]":
        """(busy threads, cores) of a run of ``nodes`` nodes on this host, for
        a local cluster (its daemons share this host); (0, 0) otherwise."""
        if self.mode != "local":
            return 0, 0
        from .result import busy_threads, host_cores
        return busy_threads(placement, nodes, getattr(self, "progress", "blocking")), host_cores()

    def _check_node(self, node: Any) -> int:
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)):
            raise InvalidArgument(f"node must be an int (a daemon rank), not {node!r}")
        node = int(node)
        if node not in self._ranks:
            if self._node is not None and not self.closed and 0 <= node < _lib.ext().lib.DSM_MAX_DAEMONS:
                self._ranks = sorted(set(self._ranks) | set(self.live_nodes()))
            if node not in self._ranks:
                raise NoPeer(f"no node {node} in this cluster (nodes: {self._ranks})", node=node)
        return node


_PRIVATE = object()


def __getattr__(name: str) -> Any:
    # STAT_FIELDS was a constant here; the names now come from dsm_stats_t.
    if name == "STAT_FIELDS":
        return stat_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
