"""Clusters: a local one (dsmd processes on this host, the coordinator inside
this process) or a deployed one (connect to its coordinator). Either way this
process joins the fabric as a client member, so it can allocate, read, write
and run atomics on global memory, and run C workloads on the nodes.

:class:`Cluster` owns a :class:`pydsm.session.Session` (the node handle and
the bracket around every C call) and hands it to its parts, each an object
of its own: ``c.memory`` (:mod:`pydsm.memory`), ``c.own`` (:mod:`pydsm.own`),
``c.compact`` (:mod:`pydsm.compact`), ``c.chan`` (:mod:`pydsm.chan`),
``c.mheap`` (:mod:`pydsm.mheap`) and
``c.workloads`` (:mod:`pydsm.workloads`). A local cluster's daemons and the
coordinator it hosts are :mod:`pydsm.daemons`. The most used calls of the
parts are also methods of the cluster (``c.alloc``, ``c.run``, ``c.box``...),
each a one-line delegate.
"""
from __future__ import annotations

import atexit
import itertools
import os
import secrets as _secrets
import signal
import subprocess
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .chan import Chan
from .compact import Compact, CompactStore
from .daemons import Daemons
from .errors import InvalidArgument, OutOfMemory, Timeout, Unsupported
from .log import flush as _flush_log
from .log import logger as _logger
from .memory import Address, GlobalBuffer, Memory, ShapeLike
from .own import Box, Own
from .mheap import Mheap
from .session import Session
from .units import format_size, parse_size
from .workloads import Placement, Task, Workloads, stat_fields

if TYPE_CHECKING:
    import numpy.typing as npt

    from .result import Result

__all__ = ["Cluster", "GlobalBuffer", "Placement", "Task", "Address", "FABRICS", "stat_fields"]

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


def _check_room(nodes: int, partition: int, fabric: str) -> None:
    """Refuse, before anything starts, partitions this host cannot hold:
    they would fill memory (or /dev/shm) until the kernel kills processes."""
    ext = _lib.ext()
    why = ext.ffi.new("char[]", 160)
    in_shm = fabric in ("shm", "auto")   # shm partitions are files in /dev/shm
    if ext.lib.dsm_partitions_fit(nodes * partition, in_shm, why, len(why)) != ext.lib.DSM_OK:
        raise OutOfMemory(f"{nodes} nodes x partition {format_size(partition)}: "
                          f"{ext.ffi.string(why).decode()} (use a smaller partition)", op="local")


def _set_driver_log_level(level: int) -> None:
    """libdsm's log level in this process (the coordinator and the driver's
    node log here); $DSM_LOG_LEVEL, when set, wins."""
    if "DSM_LOG_LEVEL" not in os.environ:
        _lib.ext().lib.dsm_set_log_level(int(level))


def _chaos_spec(chaos: Any) -> str:
    """A chaos setting as dsmd takes it; its grammar is checked by the fabric."""
    if not isinstance(chaos, str):
        raise InvalidArgument(f"chaos must be a string 'SEED:SPEC' such as '7:all', not {chaos!r}")
    return chaos


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


class Cluster:
    """A running cluster and this process's membership in it.

    Create one with :meth:`local` or :meth:`connect`; use it as a context
    manager (or call :meth:`close`). Nodes are named by their daemon rank
    (0..N-1 for a local cluster); :attr:`nodes` lists them.

    Its parts share one :attr:`session`: ``c.memory`` (global buffers),
    ``c.own`` (boxes), ``c.compact`` (CoRM stores), ``c.chan`` (LOCO's
    objects shared by Python processes), ``c.mheap`` (the managed heap) and ``c.workloads`` (C workloads: the registry, ``run``,
    ``submit``, ``spawn``).
    """

    def __init__(self, *, _token: object = None) -> None:
        if _token is not _PRIVATE:
            raise TypeError("use Cluster.local(...) or Cluster.connect(...)")
        self.id = next(_cluster_ids)
        self.secret = ""
        self.fabric = "auto"
        self.partition = 0
        #: the node handle and the call bracket every part uses
        self.session = Session()
        self.memory = Memory(self.session)
        self.own = Own(self.session)
        self.compact = Compact(self.session)
        self.chan = Chan(self.session)
        self.workloads = Workloads(self.session)
        self.mheap = Mheap(self.workloads)
        self._daemons = Daemons("")
        #: the Placement whose delegation runtime every daemon attached (Cluster.local), or None
        self.placement: Optional[Placement] = None

    # ------------------------------------------------------------------ start
    @classmethod
    def local(cls, nodes: int = 4, fabric: str = "shm", partition: Union[int, str] = "256MiB",
              secret: Optional[str] = None, *, progress: str = "auto",
              heartbeat_ms: int = 250, peer_timeout_ms: int = 3000, op_timeout_ms: int = 5000,
              start_timeout: float = 30.0, log_level: int = 1, net_device: Optional[str] = None,
              plugin: Optional[str] = None, dsmd: Optional[str] = None,
              placement: Optional[Placement] = None, compact_store: Union[int, str, None] = None,
              compact_block: Union[int, str, None] = None, compact_workers: Optional[int] = None,
              own_cache: Union[int, str, None] = None, chaos: Optional[str] = None) -> "Cluster":
        """Start ``nodes`` dsmd processes on this host and join them.

        Args:
            nodes: number of daemons (ranks 0..nodes-1), 1..128.
            fabric: ``"shm"`` (one-sided access between processes) or ``"tcp"``
                (over loopback), or ``"verbs"``/``"auto"``.
            partition: memory each node serves, bytes or text like ``"64MiB"``.
            secret: cluster secret; a random one when None.
            progress: how each daemon's progress thread waits for messages.
                ``"auto"`` (default): ``"adaptive"`` over tcp, ``"blocking"``
                otherwise. ``"blocking"`` sleeps until a message comes (good
                on few cores; over tcp every one-sided operation then wakes
                the target). ``"hybrid"``: blocking, but a daemon polls for
                100 µs after each message before it sleeps, so a driver's
                next operation costs it no wake-up (single operations from
                Python over tcp run about 3x faster); a daemon that sees
                more runnable threads than cores in three samples in a row
                does not poll. ``"adaptive"``: hybrid whose polling follows
                what it observes: as long as the next message has lately
                come within 100 µs, shorter as it stops coming so soon,
                halved for each sample that finds the host crowded.
                ``"busy"`` polls always.
            peer_timeout_ms: silence before a node is declared dead.
            op_timeout_ms: bound on each blocking operation.
            start_timeout: seconds to wait for every daemon to join.
            log_level: dsmd's log level (0 errors .. 3 debug), to its stderr log.
            net_device: network device for tcp/verbs (default ``lo`` for tcp).
            plugin: a ``.so`` with extra workloads (a C plugin built against
                :func:`pydsm.get_include`): every daemon loads it, and so
                does this process, so ``c.workloads()`` lists its workloads
                and their arguments are checked before a run.
            dsmd: path of the daemon (default: the one shipped in the package).
            placement: a :class:`Placement` whose ``threads`` and ``trustees``
                size a delegation runtime attached to every daemon (``dsmd
                --deleg-threads``), so that delegation workloads run with
                trustees on every node (``c.run("sssp", placement)``).
            compact_store: memory of each daemon's CoRM store (``c.compact``),
                bytes or text like ``"256MiB"`` (default 16 MiB: about
                131,000 objects of up to 64 bytes); ``dsmd --compact-store``.
            compact_block: its block size, a multiple of 4 KiB up to 1 MiB
                (default 4 KiB); ``dsmd --compact-block``.
            compact_workers: its worker allocators, 1..16 (default 4);
                ``dsmd --compact-workers``.
            own_cache: own's cache budget on each daemon, bytes or text
                (default 64 MiB); ``dsmd --own-cache``.
            chaos: run every fabric of the cluster (the daemons' and this
                process's) in chaos mode, ``"SEED:SPEC"`` such as ``"7:all"``
                (``dsmd --chaos``; the README's "Chaos mode"); ``""`` for off
                whatever ``$DSM_CHAOS`` says; None (default) leaves it to
                ``$DSM_CHAOS``.

        The defaults of every per-node setting are listed in one place:
        docs/ARCHITECTURE.md, "Per-node settings".
        """
        if not isinstance(nodes, (int, np.integer)) or isinstance(nodes, bool) or not 1 <= nodes <= 128:
            raise InvalidArgument(f"nodes must be an int in 1..128, not {nodes!r}")
        _check_fabric(fabric)
        if progress not in ("auto", "blocking", "busy", "hybrid", "adaptive"):
            raise InvalidArgument("progress must be 'auto', 'blocking', 'busy', 'hybrid' or 'adaptive', "
                                  f"not {progress!r}")
        try:
            part = parse_size(partition)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if part < (1 << 20):
            raise InvalidArgument(f"partition must be at least 1MiB, not {format_size(part)}")
        _check_room(nodes, part, fabric)
        flags = _compact_(compact_store, compact_block, compact_workers)
        if chaos is not None:
            flags += ["--chaos", _chaos_spec(chaos)]
        if own_cache is not None:
            try:
                flags += ["--own-cache", str(parse_size(own_cache))]
            except ValueError as exc:
                raise InvalidArgument(f"own_cache: {exc}") from None
        if placement is not None and not isinstance(placement, Placement):
            raise InvalidArgument(f"placement must be a Placement, not {placement!r}")
        if placement is not None and placement.trustees == "dedicated" and placement.threads < 2:
            raise InvalidArgument("Placement(trustees='dedicated') needs threads >= 2 (one runs the workload)")
        dsmd = dsmd or _lib.dsmd_path()
        _set_driver_log_level(log_level)
        if plugin is not None:
            _lib.load_plugin(plugin)   # here first: a broken plugin fails before any daemon starts

        self = cls(_token=_PRIVATE)
        self.fabric = fabric
        self.placement = placement
        self.partition = part
        self.secret = secret or _secrets.token_hex(16)
        self._daemons.secret = self.secret
        s = self.session
        s.mode, s.progress, s.op_timeout_ms = "local", progress, op_timeout_ms
        s.daemon_log = self._daemons.log
        if net_device is None and fabric == "tcp":
            net_device = "lo"
        try:
            # 1. The coordinator lives in this process.
            s.coordinator = self._daemons.start_coordinator(fabric, peer_timeout_ms)
            _live.add(self)
            # 2. The daemons.
            self._daemons.start(dsmd, nodes, fabric, part, progress, heartbeat_ms, peer_timeout_ms,
                                op_timeout_ms, log_level, net_device, plugin, placement, flags)
            # 3. This process joins as a client and waits for every daemon.
            self._join(fabric, net_device, peer_timeout_ms, op_timeout_ms, heartbeat_ms,
                       join_timeout_ms=int(start_timeout * 1000), chaos=chaos)
            self._wait_daemons(nodes, start_timeout)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def connect(cls, coordinator: str, secret: str, *, fabric: str = "auto",
                net_device: Optional[str] = None, nodes: Optional[int] = None,
                timeout: float = 30.0, peer_timeout_ms: int = 3000,
                op_timeout_ms: int = 5000, log_level: int = 1, chaos: Optional[str] = None) -> "Cluster":
        """Join a deployed cluster through its coordinator ``HOST:PORT``.

        ``nodes``: wait until at least this many daemons are up (default 1).
        ``chaos``: this process's fabric in chaos mode, as in :meth:`local`.
        A wrong secret raises :class:`pydsm.AuthError`.
        """
        if not isinstance(coordinator, str) or ":" not in coordinator:
            raise InvalidArgument(f"coordinator must be 'HOST:PORT', not {coordinator!r}")
        if not secret:
            raise InvalidArgument("a cluster secret is required")
        _check_fabric(fabric)
        _set_driver_log_level(log_level)
        self = cls(_token=_PRIVATE)
        s = self.session
        s.mode, s.coordinator, s.op_timeout_ms = "connect", coordinator, op_timeout_ms
        self.secret = secret
        self.fabric = fabric
        if net_device is None and fabric == "tcp" and coordinator.split(":")[0] in ("127.0.0.1", "localhost"):
            net_device = "lo"
        try:
            _live.add(self)
            self._join(fabric, net_device, peer_timeout_ms, op_timeout_ms, 0,
                       join_timeout_ms=int(timeout * 1000), chaos=chaos)
            self._wait_daemons(nodes or 1, timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _join(self, fabric: str, net_device: Optional[str], peer_timeout_ms: int,
              op_timeout_ms: int, heartbeat_ms: int, join_timeout_ms: int, chaos: Optional[str] = None) -> None:
        e = _lib.ext()
        ffi, lib = e.ffi, e.lib
        cfg = ffi.new("dsm_node_config_t *")
        lib.dsm_node_config_init(cfg)
        coord, sec, dev = _lib.cstr(self.coordinator), _lib.cstr(self.secret), _lib.cstr(net_device)
        spec = _lib.cstr(None if chaos is None else _chaos_spec(chaos))
        self._daemons._keep += [coord, sec, dev, spec]
        cfg.coordinator, cfg.secret = coord, sec
        cfg.chaos = spec
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
                                  (f": {why}" if why else "") + self._daemons.logs_hint(), op="join")
        self.session.node = pnode[0]
        self.session.fetch_add_c = lib._pydsm_fetch_add
        # "auto" resolves to the transport the coordinator names, if it does.
        self.fabric = ffi.string(lib.dsm_transport_name(lib.dsm_node_config(pnode[0]).transport)).decode()

    def _wait_daemons(self, count: int, timeout: float) -> None:
        lib = _lib.ext().lib
        deadline = time.monotonic() + timeout
        while True:
            self._daemons.check_processes()
            with self.session.in_use() as n:
                st = lib.dsm_node_wait_daemons(n, count, 200)
            if st == 0:
                break
            if st != lib.DSM_ERR_TIMEOUT:
                _lib.check(st, "waiting for the daemons" + self._daemons.logs_hint(), op="wait_daemons")
            if time.monotonic() > deadline:
                up = self.live_nodes()
                raise Timeout(f"only {len(up)} of {count} daemons joined within {timeout:.0f} s "
                              f"(up: {up})" + self._daemons.logs_hint(), op="start")
        self.session.ranks = self.live_nodes()

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
        state = "closed" if self.closed else f"{len(self.session.ranks)} nodes"
        return f"<pydsm.Cluster {self.mode} {self.fabric} {self.coordinator} {state}>"

    @property
    def coordinator(self) -> str:
        """The coordinator's ``HOST:PORT``."""
        return self.session.coordinator

    @property
    def mode(self) -> str:
        """``"local"`` (daemons started here) or ``"connect"`` (a deployed cluster)."""
        return self.session.mode

    @property
    def closed(self) -> bool:
        return self.session.closed

    @property
    def processes(self) -> "List[subprocess.Popen[bytes]]":
        """The dsmd processes of a local cluster, by rank."""
        return self._daemons.processes

    def close(self, timeout: float = 5.0) -> None:
        """Leave the cluster; for a local one stop and reap every dsmd.

        Idempotent. Operations in flight in other threads finish (bounded by
        the op timeout) before the node is torn down. Called on a thread
        Python did not start (a finaliser run on another library's thread),
        it hands the work to a Python thread and returns: a node cannot be
        torn down from one of its own threads."""
        if isinstance(threading.current_thread(), threading._DummyThread):
            threading.Thread(target=self.close, args=(timeout,), name="pydsm-close").start()
            return
        s = self.session
        already, stuck = s.drain(s.op_timeout_ms / 1000 + 1)
        if already:
            return
        ffi = _lib.ext().ffi
        lib = _lib.ext().lib if (s.node is not None or self._daemons._coord is not None) else None
        tasks = list(s.tasks.values())
        s.tasks.clear()
        # Ask the workloads still running to stop (they poll their stop
        # flag), and give them a moment, so that a connected cluster's
        # daemons are left idle and a local one stops promptly.
        if tasks and lib is not None:
            for task in tasks:
                lib.dsm_task_cancel(task)
            grace = time.monotonic() + min(timeout, 2.0)
            pending = list(tasks)
            while pending and time.monotonic() < grace:
                pending = [t for t in pending if lib.dsm_join(t, ffi.NULL, 0, ffi.NULL, 50) == lib.DSM_ERR_TIMEOUT]
            tasks = pending
        # Stop the daemons first when tasks are still running on them, so
        # those tasks end (their target left) before the node goes away.
        if tasks:
            self._daemons.stop_coordinator()
        for task in tasks:
            if lib is not None and lib.dsm_join(task, ffi.NULL, 0, ffi.NULL, int(timeout * 1000)) == lib.DSM_ERR_TIMEOUT:
                stuck = True
        if s.node is not None:
            if not stuck and lib is not None:  # never free a node that a C call may still be using
                viewed = self.chan._close_all()
                if viewed:   # never free memory a numpy view still shows
                    _logger.warning("cluster closed with views of shared_region %s alive: the node and its "
                                    "memory stay until the process exits (drop the views before close)",
                                    ", ".join(f"'{v}'" for v in viewed))
                else:
                    lib.dsm_node_destroy(s.node)
            s.node = None
        self._daemons.stop_coordinator()
        self._daemons.reap(timeout)
        self._daemons.cleanup()
        _live.discard(self)
        _flush_log()   # what the cluster's threads logged is out when close returns

    # ------------------------------------------------------------ membership
    @property
    def nodes(self) -> List[int]:
        """Daemon ranks of the cluster as started (dead ones included)."""
        return list(self.session.ranks)

    def __len__(self) -> int:
        return len(self.session.ranks)

    @property
    def rank(self) -> int:
        """This process's (client) rank."""
        with self.session.in_use() as n:
            return int(_lib.ext().lib.dsm_node_rank(n))

    def live_nodes(self) -> List[int]:
        """Daemon ranks that are live members right now."""
        return self.session.live_nodes()

    def node_alive(self, node: int) -> bool:
        """True if daemon ``node`` is connected and alive."""
        node = self.session.check_node(node)
        with self.session.in_use() as n:
            return bool(_lib.ext().lib.dsm_node_peer_state(n, node) == 0)

    def partition_size(self, node: int) -> int:
        """Bytes of memory node ``node`` serves."""
        return self.session.partition_size(node)

    def stats(self, node: Optional[int] = None) -> Dict[str, int]:
        """Counters of daemon ``node`` (or of this process when None)."""
        return self.session.stats(node)

    def connection_info(self) -> Dict[str, str]:
        """How another process joins this cluster (pydsm.Cluster.connect)."""
        return {"coordinator": self.coordinator, "secret": self.secret, "fabric": self.fabric}

    # --------------------------------------------------------------- daemons
    def log(self, node: int) -> str:
        """The stderr log of local daemon ``node`` so far (empty if none)."""
        return self._daemons.log(node)

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` lines of every local daemon's log, each under
        a header naming its rank (empty if none)."""
        return self._daemons.logs_hint(lines)

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Kill local daemon ``node`` (for failure experiments and tests)."""
        if self.mode != "local":
            raise InvalidArgument("kill() only works on a local cluster")
        self._daemons.kill(self.session.check_node(node), sig)

    # ---------------------------------------- delegates to the parts (one line each)
    def alloc(self, size: Any, node: int = 0, *, dtype: "Optional[npt.DTypeLike]" = None,
              shape: Optional[ShapeLike] = None) -> GlobalBuffer:
        """:meth:`Memory.alloc <pydsm.memory.Memory.alloc>`: a size (contents
        undefined, as ``empty``) or data (as ``asarray``)."""
        return self.memory.alloc(size, node, dtype=dtype, shape=shape)

    def empty(self, shape: ShapeLike, dtype: "npt.DTypeLike" = np.float64, *, node: int = 0) -> GlobalBuffer:
        """:meth:`Memory.empty <pydsm.memory.Memory.empty>`."""
        return self.memory.empty(shape, dtype, node=node)

    def zeros(self, shape: ShapeLike, dtype: "npt.DTypeLike" = np.float64, *, node: int = 0) -> GlobalBuffer:
        """:meth:`Memory.zeros <pydsm.memory.Memory.zeros>`."""
        return self.memory.zeros(shape, dtype, node=node)

    def asarray(self, data: Any, dtype: "Optional[npt.DTypeLike]" = None, *, node: int = 0) -> GlobalBuffer:
        """:meth:`Memory.asarray <pydsm.memory.Memory.asarray>`."""
        return self.memory.asarray(data, dtype, node=node)

    def free(self, where: Address) -> None:
        """:meth:`Memory.free <pydsm.memory.Memory.free>`."""
        self.memory.free(where)

    def read(self, where: Address, nbytes: Optional[int] = None, **kw: Any) -> "npt.NDArray[Any]":
        """:meth:`Memory.read <pydsm.memory.Memory.read>` (by global address)."""
        return self.memory.read(where, nbytes, **kw)

    def write(self, where: Address, data: Any, **kw: Any) -> None:
        """:meth:`Memory.write <pydsm.memory.Memory.write>` (by global address)."""
        self.memory.write(where, data, **kw)

    def fetch_add(self, where: Address, value: int = 1) -> int:
        """:meth:`Memory.fetch_add <pydsm.memory.Memory.fetch_add>` (by global address)."""
        return self.memory.fetch_add(where, value)

    def cas(self, where: Address, expected: int, desired: int) -> int:
        """:meth:`Memory.cas <pydsm.memory.Memory.cas>` (by global address)."""
        return self.memory.cas(where, expected, desired)

    def swap(self, where: Address, value: int) -> int:
        """:meth:`Memory.swap <pydsm.memory.Memory.swap>` (by global address)."""
        return self.memory.swap(where, value)

    def read_many(self, addrs: Any, dtype: "npt.DTypeLike" = np.uint64) -> "npt.NDArray[Any]":
        """:meth:`Memory.read_many <pydsm.memory.Memory.read_many>`."""
        return self.memory.read_many(addrs, dtype)

    def write_many(self, addrs: Any, values: Any, dtype: Optional[npt.DTypeLike] = None) -> None:
        """:meth:`Memory.write_many <pydsm.memory.Memory.write_many>`."""
        self.memory.write_many(addrs, values, dtype)

    def fetch_add_many(self, addrs: Any, values: Any = 1) -> "npt.NDArray[np.uint64]":
        """:meth:`Memory.fetch_add_many <pydsm.memory.Memory.fetch_add_many>`."""
        return self.memory.fetch_add_many(addrs, values)

    def box(self, data: Any, dtype: Any = None, node: int = 0) -> Box:
        """:meth:`Own.box <pydsm.own.Own.box>`."""
        return self.own.box(data, dtype, node)

    def own_stats(self) -> Dict[str, int]:
        """:meth:`Own.stats <pydsm.own.Own.stats>`."""
        return self.own.stats()

    def compact_store(self, node: int = 0) -> CompactStore:
        """:meth:`Compact.store <pydsm.compact.Compact.store>`."""
        return self.compact.store(node)

    def spawn(self, node: int, workload: str, args: Union[bytes, Mapping[str, Any]] = b"") -> Task:
        """:meth:`Workloads.spawn <pydsm.workloads.Workloads.spawn>`."""
        return self.workloads.spawn(node, workload, args)

    def submit(self, workload: str, placement: Optional[Placement] = None, *,
               nodes: Optional[Sequence[int]] = None, progress: Optional[bool] = None, **params: Any) -> Task:
        """:meth:`Workloads.submit <pydsm.workloads.Workloads.submit>`."""
        return self.workloads.submit(workload, placement, nodes=nodes, progress=progress, **params)

    def run(self, workload: str, placement: Optional[Placement] = None, *,
            nodes: Optional[Sequence[int]] = None, timeout: Optional[float] = None,
            progress: Optional[bool] = None, **params: Any) -> "Result":
        """:meth:`Workloads.run <pydsm.workloads.Workloads.run>`."""
        return self.workloads.run(workload, placement, nodes=nodes, timeout=timeout, progress=progress, **params)


_PRIVATE = object()


def _compact_(store: Union[int, str, None], block: Union[int, str, None],
                workers: Optional[int]) -> List[str]:
    """dsmd's flags for the CoRM store's settings, checked here so that a
    bad value is refused before any daemon starts."""
    flags: List[str] = []
    sizes = {}
    for name, value in (("compact_store", store), ("compact_block", block)):
        if value is None:
            continue
        try:
            sizes[name] = parse_size(value)
        except ValueError as exc:
            raise InvalidArgument(f"{name}: {exc}") from None
    if "compact_block" in sizes:
        b = sizes["compact_block"]
        if b <= 0 or b % 4096 or b > (1 << 20):
            raise InvalidArgument(f"compact_block must be a multiple of 4KiB up to 1MiB, not {format_size(b)}")
        flags += ["--compact-block", str(b)]
    if "compact_store" in sizes:
        st = sizes["compact_store"]
        if st < sizes.get("compact_block", 4096):
            raise InvalidArgument(f"compact_store must hold at least one block, not {format_size(st)}")
        flags += ["--compact-store", str(st)]
    if workers is not None:
        if not isinstance(workers, (int, np.integer)) or isinstance(workers, bool) or not 1 <= workers <= 16:
            raise InvalidArgument(f"compact_workers must be an int in 1..16, not {workers!r}")
        flags += ["--compact-workers", str(int(workers))]
    return flags


def __getattr__(name: str) -> Any:
    # STAT_FIELDS was a constant here; the names now come from dsm_stats_t.
    if name == "STAT_FIELDS":
        return stat_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
