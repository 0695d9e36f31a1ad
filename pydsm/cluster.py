"""Clusters: a local one (dsmd processes on this host, the coordinator inside
this process) or a deployed one (connect to its coordinator). Either way this
process joins the fabric as a client member, so it can allocate, read, write
and run atomics on global memory, and run C workloads on the nodes.
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import secrets as _secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .errors import (BadAddress, ClusterClosed, DaemonFailed, DsmError, InvalidArgument,
                     NoPeer, OutOfMemory, Timeout)
from .units import format_size, parse_size

if TYPE_CHECKING:  # imported lazily at run time (result imports matplotlib)
    from .result import Result

FABRICS = ("shm", "tcp", "verbs", "auto")
_U64 = (1 << 64) - 1
_cluster_ids = itertools.count(1)
_live: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for c in list(_live):
        try:
            c.close()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass


atexit.register(_close_all_at_exit)


class _DeathSignal:
    """preexec_fn for dsmd: a new session (Ctrl-C in the driver's terminal
    reaches only the driver, which then stops the cluster cleanly) and
    PR_SET_PDEATHSIG so the daemon gets SIGTERM when the driver dies. The
    coordinator's socket closing does the same job (dsmd exits 3 when it loses
    the coordinator); this is the faster of the two."""

    PR_SET_PDEATHSIG = 1

    def __init__(self) -> None:
        try:
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # pragma: no cover - non-Linux
            self._prctl = None

    def __call__(self) -> None:
        os.setsid()
        if self._prctl is not None:
            self._prctl(self.PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _c(s: Optional[str]) -> Any:
    """A NUL-terminated C string that lives as long as the returned object."""
    ffi = _lib.ext().ffi
    return ffi.NULL if s is None else ffi.new("char[]", s.encode())


Address = Union[int, "GlobalBuffer"]


def _set_driver_log_level(level: int) -> None:
    """libdsm's log level in this process (the coordinator and the driver's
    node log here); $DSM_LOG_LEVEL, when set, wins."""
    if "DSM_LOG_LEVEL" not in os.environ:
        _lib.ext().lib.dsm_set_log_level(int(level))


class GlobalBuffer:
    """An allocation in global memory: ``nbytes`` bytes on node ``node``.

    Reads and writes go through numpy arrays; 64-bit atomics address words
    by index. Use it as a context manager (or call :meth:`free`) to free it.
    ``int(buf)`` is its global address, which C workloads take as a param.
    """

    def __init__(self, cluster: "Cluster", address: int, nbytes: int, node: int,
                 dtype: Optional[np.dtype] = None, shape: Optional[Tuple[int, ...]] = None) -> None:
        self.cluster = cluster
        self.address = int(address)
        self.nbytes = int(nbytes)
        self.node = int(node)
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.uint8)
        self.shape = tuple(shape) if shape is not None else (self.nbytes // self.dtype.itemsize,)
        self.freed = False

    def __int__(self) -> int:
        return self.address

    def __index__(self) -> int:
        return self.address

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return (f"<GlobalBuffer {self.address:#x} node={self.node} nbytes={self.nbytes} "
                f"dtype={self.dtype} shape={self.shape}{state}>")

    def __enter__(self) -> "GlobalBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.freed and not self.cluster.closed:
            self.free()

    def addr(self, offset: int = 0) -> int:
        """Global address of byte ``offset`` of this buffer (bounds-checked)."""
        if not 0 <= offset <= self.nbytes:
            raise BadAddress(f"offset {offset} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self.address + offset

    def read(self, dtype: Any = None, shape: Any = None, offset: int = 0,
             out: Optional[np.ndarray] = None) -> np.ndarray:
        """Read into a new numpy array (or ``out``). By default the whole
        buffer with the dtype and shape it was allocated with."""
        if out is not None:
            return self.cluster.read(self, out=out, offset=offset)
        dt = np.dtype(dtype) if dtype is not None else self.dtype
        if shape is None:
            if dtype is None and offset == 0:
                shape = self.shape
            else:
                shape = ((self.nbytes - offset) // dt.itemsize,)
        return self.cluster.read(self, dtype=dt, shape=shape, offset=offset)

    def write(self, data: Any, offset: int = 0) -> None:
        """Write a numpy array (or anything ``np.asarray`` takes, or bytes) at ``offset``."""
        self.cluster.write(self, data, offset=offset)

    def _word(self, index: int) -> int:
        off = int(index) * 8
        if index < 0 or off + 8 > self.nbytes:
            raise BadAddress(f"word {index} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self.address + off

    def fetch_add(self, value: int = 1, index: int = 0) -> int:
        """Atomically add ``value`` (mod 2**64) to 64-bit word ``index``; returns the old value."""
        return self.cluster.fetch_add(self._word(index), value)

    def cas(self, expected: int, desired: int, index: int = 0) -> int:
        """Compare-and-swap on word ``index``; returns the old value (== expected on success)."""
        return self.cluster.cas(self._word(index), expected, desired)

    def swap(self, value: int, index: int = 0) -> int:
        """Atomically replace word ``index``; returns the old value."""
        return self.cluster.swap(self._word(index), value)

    def free(self) -> None:
        """Free the allocation (a second free raises BadAddress)."""
        self.cluster.free(self)


class Placement:
    """Where and how a workload runs.

    Args:
        threads: threads per node.
        pin: ``"compact"``, ``"scatter"`` or ``"none"`` (CPU pinning of threads).
        trustees: ``"dedicated"`` or ``"shared"`` (delegation workloads).
        memory_nodes: nodes that serve memory for the workload (default: all).
        nodes: nodes that run the workload (default: every live node).
    """

    PINS = ("compact", "scatter", "none")
    TRUSTEES = ("dedicated", "shared")

    def __init__(self, threads: int = 1, pin: str = "none", trustees: str = "shared",
                 memory_nodes: Optional[Sequence[int]] = None,
                 nodes: Optional[Sequence[int]] = None) -> None:
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or not 1 <= threads <= 256:
            raise InvalidArgument(f"threads must be an int in 1..256, not {threads!r}")
        if pin not in self.PINS:
            raise InvalidArgument(f"pin must be one of {self.PINS}, not {pin!r}")
        if trustees not in self.TRUSTEES:
            raise InvalidArgument(f"trustees must be one of {self.TRUSTEES}, not {trustees!r}")
        self.threads = int(threads)
        self.pin = pin
        self.trustees = trustees
        self.memory_nodes = None if memory_nodes is None else [int(n) for n in memory_nodes]
        self.nodes = None if nodes is None else [int(n) for n in nodes]

    def __repr__(self) -> str:
        return (f"Placement(threads={self.threads}, pin={self.pin!r}, trustees={self.trustees!r}, "
                f"memory_nodes={self.memory_nodes}, nodes={self.nodes})")

    def as_params(self) -> Dict[str, str]:
        """The placement keys of the workload argument text."""
        p = {"threads": str(self.threads), "pin": self.pin, "trustees": self.trustees}
        if self.memory_nodes is not None:
            p["memory_nodes"] = ",".join(map(str, self.memory_nodes))
        return p


def encode_args(params: Mapping[str, Any]) -> bytes:
    """Workload argument text: one ``key=value`` line per param (UTF-8).

    GlobalBuffers become their address in decimal, bools 1/0, sequences
    comma-separated lists. Keys and values may not contain newlines or '='
    (keys)."""
    lines = []
    for key, value in params.items():
        if not key or "=" in key or "\n" in key:
            raise InvalidArgument(f"bad workload parameter name {key!r}")
        if isinstance(value, GlobalBuffer):
            text = str(value.address)
        elif isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, (list, tuple)):
            text = ",".join(str(int(v) if isinstance(v, GlobalBuffer) else v) for v in value)
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        if "\n" in text:
            raise InvalidArgument(f"workload parameter {key!r} contains a newline")
        lines.append(f"{key}={text}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_result(text: bytes) -> List[Tuple[str, float, str]]:
    """Parse workload result text: ``name value unit`` per line."""
    out = []
    for line in text.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            value = float(parts[1]) if len(parts) > 1 else float("nan")
        except ValueError:
            value = float("nan")
        out.append((parts[0], value, " ".join(parts[2:])))
    return out


class Cluster:
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
        self._inflight = 0
        self._tasks: Dict[int, Any] = {}
        self._task_ids = itertools.count(1)
        self.op_timeout_ms = 5000

    # ------------------------------------------------------------------ start
    @classmethod
    def local(cls, nodes: int = 4, fabric: str = "shm", partition: Union[int, str] = "256MiB",
              secret: Optional[str] = None, *, progress: str = "blocking",
              heartbeat_ms: int = 250, peer_timeout_ms: int = 3000, op_timeout_ms: int = 5000,
              start_timeout: float = 30.0, log_level: int = 1, net_device: Optional[str] = None,
              plugin: Optional[str] = None, dsmd: Optional[str] = None) -> "Cluster":
        """Start ``nodes`` dsmd processes on this host and join them.

        Args:
            nodes: number of daemons (ranks 0..nodes-1), 1..128.
            fabric: ``"shm"`` (one-sided access between processes) or ``"tcp"``
                (over loopback), or ``"verbs"``/``"auto"``.
            partition: memory each node serves, bytes or text like ``"64MiB"``.
            secret: cluster secret; a random one when None.
            progress: ``"blocking"`` (good on few cores) or ``"busy"``.
            peer_timeout_ms: silence before a node is declared dead.
            op_timeout_ms: bound on each blocking operation.
            start_timeout: seconds to wait for every daemon to join.
            log_level: dsmd's log level (0 errors .. 3 debug), to its stderr log.
            net_device: network device for tcp/verbs (default ``lo`` for tcp).
            plugin: a ``.so`` with extra workloads every daemon loads.
            dsmd: path of the daemon (default: the one shipped in the package).
        """
        if not isinstance(nodes, (int, np.integer)) or isinstance(nodes, bool) or not 1 <= nodes <= 128:
            raise InvalidArgument(f"nodes must be an int in 1..128, not {nodes!r}")
        if fabric not in FABRICS:
            raise InvalidArgument(f"fabric must be one of {FABRICS}, not {fabric!r}")
        if progress not in ("blocking", "busy"):
            raise InvalidArgument(f"progress must be 'blocking' or 'busy', not {progress!r}")
        try:
            part = parse_size(partition)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        if part < (1 << 20):
            raise InvalidArgument(f"partition must be at least 1MiB, not {format_size(part)}")
        dsmd = dsmd or _lib.dsmd_path()
        e = _lib.ext()
        ffi, lib = e.ffi, e.lib
        _set_driver_log_level(log_level)

        self = cls(_token=_PRIVATE)
        self.mode = "local"
        self.fabric = fabric
        self.partition = part
        self.secret = secret or _secrets.token_hex(16)
        self.op_timeout_ms = op_timeout_ms
        if net_device is None and fabric == "tcp":
            net_device = "lo"
        try:
            # 1. The coordinator lives in this process.
            cc = ffi.new("dsm_coord_config_t *")
            bind, sec = _c("127.0.0.1:0"), _c(self.secret)
            self._keep += [bind, sec]
            cc.bind, cc.secret, cc.peer_timeout_ms = bind, sec, peer_timeout_ms
            # Clients that join with fabric="auto" learn the cluster's from here.
            ptrans = ffi.new("dsm_transport_t *")
            _lib.check(lib.dsm_transport_parse(fabric.encode(), ptrans), f"unknown fabric {fabric!r}")
            cc.transport = ptrans[0]
            pcoord = ffi.new("dsm_coord_t **")
            _lib.check(lib.dsm_coord_start(cc, pcoord), "cannot start the coordinator", op="coord_start")
            self._coord = pcoord[0]
            self.coordinator = f"127.0.0.1:{lib.dsm_coord_port(self._coord)}"
            _live.add(self)
            # 2. The daemons.
            self._logdir = tempfile.TemporaryDirectory(prefix="pydsm-")
            env = dict(os.environ, DSM_SECRET=self.secret)
            env.setdefault("UCX_PROTO_ENABLE", "y")
            preexec = _DeathSignal() if threading.current_thread() is threading.main_thread() else os.setsid
            for rank in range(nodes):
                argv = [dsmd, "--coordinator", self.coordinator, "--rank", str(rank),
                        "--transport", fabric, "--partition", str(part), "--progress", progress,
                        "--heartbeat-ms", str(heartbeat_ms), "--peer-timeout-ms", str(peer_timeout_ms),
                        "--op-timeout-ms", str(op_timeout_ms), "--log-level", str(log_level)]
                if net_device:
                    argv += ["--net-device", net_device]
                if plugin:
                    argv += ["--plugin", plugin]
                log = os.path.join(self._logdir.name, f"dsmd-{rank}.log")
                self._logs.append(log)
                with open(log, "wb") as f:
                    self.processes.append(subprocess.Popen(
                        argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                        preexec_fn=preexec, close_fds=True))
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
        if fabric not in FABRICS:
            raise InvalidArgument(f"fabric must be one of {FABRICS}, not {fabric!r}")
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
        coord, sec, dev = _c(self.coordinator), _c(self.secret), _c(net_device)
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
        st = lib.dsm_start(cfg, pnode)
        if st < 0:
            raise _lib.make_error(st, f"cannot join the cluster at {self.coordinator}" +
                                  self._daemon_logs_hint(), op="join")
        self._node = pnode[0]
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

    def _check_processes(self) -> None:
        for rank, p in enumerate(self.processes):
            rc = p.poll()
            if rc is not None:
                raise DaemonFailed(f"dsmd rank {rank} exited with status {rc} during start-up"
                                   + self._log_tail(rank), node=rank, op="start")

    def _log_tail(self, rank: int, lines: int = 15) -> str:
        if rank >= len(self._logs):
            return ""
        try:
            with open(self._logs[rank], "rb") as f:
                text = f.read()[-8192:].decode("utf-8", "replace")
        except OSError:
            return ""
        tail = text.strip().splitlines()[-lines:]
        return ("\n--- dsmd rank %d log (last lines) ---\n" % rank + "\n".join(tail)) if tail else ""

    def _daemon_logs_hint(self) -> str:
        return "".join(self._log_tail(r, 5) for r in range(len(self._logs)))

    def log(self, node: int) -> str:
        """The stderr log of local daemon ``node`` so far (empty if none)."""
        try:
            with open(self._logs[node], "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, IndexError):
            return ""

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
            while self._inflight and time.monotonic() < deadline:
                self._lock.wait(0.1)
            stuck = self._inflight > 0
        lib = _lib.ext().lib if (self._node is not None or self._coord is not None) else None
        tasks = list(self._tasks.values())
        self._tasks.clear()
        # Stop the daemons first when tasks are still running on them, so
        # those tasks end (their target left) before the node goes away.
        if tasks and self._coord is not None:
            lib.dsm_coord_stop(self._coord)
            self._coord = None
        for task in tasks:
            if lib.dsm_join(task, _lib.ext().ffi.NULL, 0, _lib.ext().ffi.NULL, int(timeout * 1000)) == lib.DSM_ERR_TIMEOUT:
                stuck = True
        if self._node is not None:
            if not stuck:  # never free a node that a C call may still be using
                lib.dsm_node_destroy(self._node)
            self._node = None
        if self._coord is not None:
            lib.dsm_coord_stop(self._coord)
            self._coord = None
        self._reap(timeout)
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None
        _live.discard(self)

    def _reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.processes if p.poll() is None]
            if not alive:
                return
            for p in alive:
                if sig is not None:
                    try:
                        p.send_signal(sig)
                    except ProcessLookupError:
                        pass
            for p in alive:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()) if sig is None else 3.0)
                except subprocess.TimeoutExpired:
                    pass

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
        buf = e.ffi.new("uint32_t[]", 256)
        n = e.lib.dsm_node_daemons(self._node, buf, 256)
        return [int(buf[i]) for i in range(min(n, 256))]

    def node_alive(self, node: int) -> bool:
        """True if daemon ``node`` is connected and alive."""
        self._ensure_open()
        return _lib.ext().lib.dsm_node_peer_state(self._node, self._check_node(node)) == 0

    def partition_size(self, node: int) -> int:
        """Bytes of memory node ``node`` serves."""
        self._ensure_open()
        return int(_lib.ext().lib.dsm_heap_partition_size(self._node, self._check_node(node)))

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Kill local daemon ``node`` (for failure experiments and tests)."""
        if self.mode != "local":
            raise InvalidArgument("kill() only works on a local cluster")
        self._check_node(node)
        self.processes[node].send_signal(sig)
        self.processes[node].wait(10)

    def connection_info(self) -> Dict[str, str]:
        """How another process joins this cluster (pydsm.Cluster.connect)."""
        return {"coordinator": self.coordinator, "secret": self.secret, "fabric": self.fabric}

    # ---------------------------------------------------------------- guards
    def _ensure_open(self) -> None:
        if self.closed:
            raise ClusterClosed(f"the cluster at {self.coordinator or '?'} is closed")
        if self._node is None:
            raise ClusterClosed("the cluster is not started")

    @contextmanager
    def _node_in_use(self) -> Iterator[Any]:
        """The open node, counted as in use (close() waits for it) while the
        block runs a call of the C core."""
        with self._lock:
            self._ensure_open()
            self._inflight += 1
        try:
            yield self._node
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight:
                    self._lock.notify_all()

    def _check_node(self, node: Any) -> int:
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)):
            raise InvalidArgument(f"node must be an int (a daemon rank), not {node!r}")
        node = int(node)
        if node not in self._ranks:
            if self._node is not None and not self.closed and 0 <= node < 128:
                self._ranks = sorted(set(self._ranks) | set(self.live_nodes()))
            if node not in self._ranks:
                raise NoPeer(f"no node {node} in this cluster (nodes: {self._ranks})", node=node)
        return node

    def _resolve(self, where: Address, offset: int = 0, nbytes: int = 0) -> Tuple[int, Optional[GlobalBuffer]]:
        """Global address for ``where`` (+offset), checked against its buffer."""
        if isinstance(where, GlobalBuffer):
            if where.cluster is not self:
                raise BadAddress(f"{where!r} belongs to another cluster "
                                 f"({where.cluster.coordinator}), not this one ({self.coordinator})",
                                 node=where.node, address=where.address)
            if where.freed:
                raise BadAddress("the buffer was freed", node=where.node, address=where.address)
            if offset < 0 or offset + nbytes > where.nbytes:
                raise BadAddress(f"access of {nbytes} bytes at offset {offset} is outside the "
                                 f"buffer of {where.nbytes} bytes", node=where.node, address=where.address)
            return where.address + offset, where
        if isinstance(where, bool) or not isinstance(where, (int, np.integer)):
            raise InvalidArgument(f"an address must be a GlobalBuffer or an int, not {type(where).__name__}")
        addr = int(where) + offset
        if not 0 < addr <= _U64:
            raise BadAddress(f"{addr:#x} is not a global address", address=addr)
        return addr, None

    @staticmethod
    def _node_of(addr: int) -> int:
        return (addr >> 40) & 0xFF

    # ---------------------------------------------------------------- memory
    def alloc(self, size: Union[int, np.ndarray, str], node: int = 0, *,
              dtype: Any = None, shape: Any = None) -> GlobalBuffer:
        """Allocate global memory on daemon ``node``.

        ``size`` is a byte count (or text like ``"1MiB"``), or a numpy array:
        then the buffer gets its dtype and shape and its contents are written.
        ``dtype``/``shape`` set how :meth:`GlobalBuffer.read` sees the bytes.
        """
        data = None
        if isinstance(size, np.ndarray):
            data = np.ascontiguousarray(size)
            nbytes, dtype, shape = data.nbytes, data.dtype, data.shape
        elif isinstance(size, (str, int, np.integer)) and not isinstance(size, bool):
            try:
                nbytes = parse_size(int(size) if isinstance(size, np.integer) else size)
            except ValueError as exc:
                raise InvalidArgument(str(exc), op="alloc") from None
            if dtype is not None:
                dt = np.dtype(dtype)
                if shape is None:
                    shape = (nbytes // dt.itemsize,)
        else:
            raise InvalidArgument(f"alloc takes a size in bytes or a numpy array, not {type(size).__name__}")
        if nbytes <= 0:
            raise InvalidArgument(f"cannot allocate {nbytes} bytes", op="alloc")
        if dtype is not None and shape is not None:
            need = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if need > nbytes:
                raise InvalidArgument(f"shape {tuple(shape)} of {np.dtype(dtype)} needs {need} bytes, "
                                      f"more than {nbytes}")
        node = self._check_node(node)
        cap = self.partition_size(node)
        if cap and nbytes > cap:
            raise OutOfMemory(f"cannot allocate {format_size(nbytes)}: node {node} serves only "
                              f"{format_size(cap)}", node=node, op="alloc")
        e = _lib.ext()
        out = e.ffi.new("dsm_gaddr_t *")
        with self._node_in_use() as n:
            st = e.lib.dsm_alloc(n, node, nbytes, out)
        _lib.check(st, f"cannot allocate {nbytes} bytes", node=node, op="alloc")
        buf = GlobalBuffer(self, int(out[0]), nbytes, node, dtype, shape)
        if data is not None:
            try:
                self.write(buf, data)
            except BaseException:
                self.free(buf)
                raise
        return buf

    def free(self, where: Address) -> None:
        """Free an allocation (a GlobalBuffer or its address)."""
        addr, buf = self._resolve(where)
        e = _lib.ext()
        with self._node_in_use() as n:
            st = e.lib.dsm_free(n, addr)
        _lib.check(st, "cannot free", node=self._node_of(addr), address=addr, op="free")
        if buf is not None:
            buf.freed = True

    def read(self, where: Address, nbytes: Optional[int] = None, *, dtype: Any = np.uint8,
             shape: Any = None, offset: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Read global memory into a numpy array.

        Give ``out`` (a C-contiguous writable array) to read into it, or
        ``shape``/``dtype``, or ``nbytes`` (a uint8 array). For a GlobalBuffer
        the default is the rest of the buffer from ``offset``.
        """
        if out is not None:
            if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
                raise InvalidArgument("out must be a writable C-contiguous numpy array")
            arr = out
        else:
            dt = np.dtype(dtype)
            if shape is None:
                if nbytes is None:
                    if not isinstance(where, GlobalBuffer):
                        raise InvalidArgument("read of a raw address needs nbytes, shape or out")
                    nbytes = where.nbytes - offset
                if nbytes < 0:
                    raise InvalidArgument(f"cannot read {nbytes} bytes", op="read")
                shape = (nbytes // dt.itemsize,)
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            if any(int(s) < 0 for s in shape):
                raise InvalidArgument(f"negative dimension in shape {shape}", op="read")
            arr = np.empty(shape, dtype=dt)
        addr, _ = self._resolve(where, offset, arr.nbytes)
        if arr.nbytes == 0:
            return arr
        e = _lib.ext()
        dst = e.ffi.from_buffer(arr, require_writable=True)
        with self._node_in_use() as n:
            st = e.lib.dsm_read(n, addr, dst, arr.nbytes)
        _lib.check(st, f"cannot read {arr.nbytes} bytes", node=self._node_of(addr), address=addr, op="read")
        return arr

    def write(self, where: Address, data: Any, *, offset: int = 0) -> None:
        """Write a numpy array (any dtype/shape; copied C-contiguous), bytes, or
        anything ``np.asarray`` accepts, to global memory."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
        else:
            arr = np.ascontiguousarray(data)
            if arr.dtype.hasobject:
                raise InvalidArgument("cannot write an array of Python objects")
        addr, _ = self._resolve(where, offset, arr.nbytes)
        if arr.nbytes == 0:
            return
        e = _lib.ext()
        src = e.ffi.from_buffer(arr)
        with self._node_in_use() as n:
            st = e.lib.dsm_write(n, addr, src, arr.nbytes)
        _lib.check(st, f"cannot write {arr.nbytes} bytes", node=self._node_of(addr), address=addr, op="write")

    def _atomic(self, op: str, where: Address, *values: int) -> int:
        addr, _ = self._resolve(where, 0, 8)
        if addr % 8:
            raise InvalidArgument(f"atomics need an 8-byte aligned address, not {addr:#x}",
                                  address=addr, op=op)
        vals = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InvalidArgument(f"{op} takes integers, not {v!r}")
            vals.append(int(v) & _U64)
        e = _lib.ext()
        old = e.ffi.new("uint64_t *")
        fn = getattr(e.lib, f"dsm_{op}")
        with self._node_in_use() as n:
            st = fn(n, addr, *vals, old)
        _lib.check(st, "", node=self._node_of(addr), address=addr, op=op)
        return int(old[0])

    def fetch_add(self, where: Address, value: int = 1) -> int:
        """Atomic 64-bit fetch-and-add (mod 2**64; negative values subtract). Returns the old value."""
        return self._atomic("fetch_add", where, value)

    def cas(self, where: Address, expected: int, desired: int) -> int:
        """Atomic 64-bit compare-and-swap. Returns the old value."""
        return self._atomic("cas", where, expected, desired)

    def swap(self, where: Address, value: int) -> int:
        """Atomic 64-bit swap. Returns the old value."""
        return self._atomic("swap", where, value)

    # ------------------------------------------------------------- workloads
    def workloads(self) -> List[str]:
        """Names of the built-in workloads (every dsmd registers them)."""
        e = _lib.ext()
        e.lib.dsm_register_builtin_workloads()
        names = []
        for i in range(1024):
            p = e.lib.dsm_registered_name(i)
            if p == e.ffi.NULL:
                break
            names.append(e.ffi.string(p).decode())
        return names

    def stats(self, node: Optional[int] = None) -> Dict[str, int]:
        """Counters of daemon ``node`` (or of this process when None)."""
        e = _lib.ext()
        out = e.ffi.new("dsm_stats_t *")
        with self._node_in_use() as n:
            if node is None:
                e.lib.dsm_node_stats(n, out)
                st = 0
            else:
                st = e.lib.dsm_node_peer_stats(n, self._check_node(node), out)
        _lib.check(st, "cannot read stats", node=node, op="stats")
        return {f: int(getattr(out, f)) for f in STAT_FIELDS}

    def spawn(self, node: int, workload: str, args: Union[bytes, Mapping[str, Any]] = b"") -> "Task":
        """Start a registered workload on one node; :meth:`Task.join` waits."""
        node = self._check_node(node)
        if not isinstance(workload, str) or not workload:
            raise InvalidArgument(f"workload must be a name, not {workload!r}")
        if not isinstance(args, (bytes, bytearray)):
            args = encode_args(args)
        e = _lib.ext()
        ptask = e.ffi.new("dsm_task_t **")
        with self._node_in_use() as n:
            st = e.lib.dsm_spawn(n, node, workload.encode(), bytes(args), len(args), ptask)
        _lib.check(st, f"cannot start workload {workload!r}", node=node, op="spawn")
        tid = next(self._task_ids)
        self._tasks[tid] = ptask[0]
        return Task(self, tid, node, workload)

    def run(self, workload: str, placement: Optional[Placement] = None, *,
            nodes: Optional[Sequence[int]] = None, timeout: Optional[float] = None,
            progress: Optional[bool] = None, **params: Any) -> "Result":
        """Run a registered C workload on every node (or ``nodes``) and return
        a :class:`pydsm.Result` with the per-node figures and the per-node
        stats counters accumulated during the run.

        ``params`` become the workload's ``key=value`` arguments (a
        GlobalBuffer passes its address). Each node also gets the placement
        keys, ``rank_index`` (its index among the running nodes) and
        ``nodes`` (how many run). ``progress``: show progress on stderr
        (default: when stderr is a terminal).
        """
        from .result import Result

        placement = placement or Placement()
        if nodes is None:
            nodes = placement.nodes
        if nodes is None:
            nodes = self.live_nodes()
        nodes = [self._check_node(n) for n in nodes]
        if not nodes:
            raise InvalidArgument("no node to run on")
        if progress is None:
            progress = sys.stderr.isatty()
        before = {n: self.stats(n) for n in nodes}
        t0 = time.monotonic()
        tasks = []
        try:
            for i, node in enumerate(nodes):
                args = dict(params)
                args.update(placement.as_params())
                args.update(rank_index=i, nodes=len(nodes))
                tasks.append(self.spawn(node, workload, args))
            outputs: Dict[int, bytes] = {}
            errors: Dict[int, DsmError] = {}
            last_report = t0
            pending = list(tasks)
            while pending:
                for task in list(pending):
                    try:
                        out = task.join(timeout=0.2)
                    except Timeout:
                        continue
                    except DsmError as exc:
                        errors[task.node] = exc
                        pending.remove(task)
                        continue
                    outputs[task.node] = out
                    pending.remove(task)
                now = time.monotonic()
                if timeout is not None and now - t0 > timeout and pending:
                    raise Timeout(f"workload {workload!r} still running on nodes "
                                  f"{[t.node for t in pending]} after {timeout} s", op="run")
                if progress and pending and now - last_report >= 1.0:
                    last_report = now
                    print(f"\r[pydsm] {workload}: {len(nodes) - len(pending)}/{len(nodes)} nodes done, "
                          f"{now - t0:.0f} s", end="", file=sys.stderr, flush=True)
            if progress and time.monotonic() - t0 >= 1.0:
                print(f"\r[pydsm] {workload}: {len(nodes)}/{len(nodes)} nodes done, "
                      f"{time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        except BaseException:
            for task in tasks:
                task._abandon()
            raise
        elapsed = time.monotonic() - t0
        if errors:
            first = next(iter(errors.values()))
            raise type(first)(f"workload {workload!r} failed on nodes {sorted(errors)}: "
                              + "; ".join(f"node {n}: {e}" for n, e in sorted(errors.items())),
                              status=first.status, status_name=first.status_name, op="run")
        after = {}
        for n in nodes:
            try:
                after[n] = self.stats(n)
            except DsmError:
                after[n] = before[n]
        figures = {n: decode_result(outputs[n]) for n in nodes}
        stats = {n: {k: after[n][k] - before[n][k] for k in STAT_FIELDS} for n in nodes}
        return Result(workload, figures, stats, elapsed=elapsed,
                      params={k: (int(v) if isinstance(v, GlobalBuffer) else v) for k, v in params.items()},
                      placement=placement)


STAT_FIELDS = ("gets", "puts", "atomics", "bytes_read", "bytes_written", "am_sent", "am_recv",
               "am_bytes_sent", "am_bytes_recv", "am_rejected", "spawns_run", "errors")


class Task:
    """A workload running on one node (from :meth:`Cluster.spawn`)."""

    def __init__(self, cluster: Cluster, tid: int, node: int, workload: str) -> None:
        self.cluster = cluster
        self.tid = tid
        self.node = node
        self.workload = workload
        self._buf: Any = None

    def join(self, timeout: Optional[float] = None) -> bytes:
        """Wait for the result text. ``timeout`` None waits until done (in
        short slices, so Ctrl-C works); on Timeout the task may be joined again."""
        e = _lib.ext()
        handle = self.cluster._tasks.get(self.tid)
        if handle is None:
            raise ClusterClosed("the task was already joined or its cluster closed", node=self.node)
        if self._buf is None:
            self._buf = e.ffi.new("char[]", e.lib.DSM_SPAWN_MAX_RESULT)
        plen = e.ffi.new("size_t *")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            slice_ms = 200 if deadline is None else max(1, min(200, int((deadline - time.monotonic()) * 1000)))
            st = e.lib.dsm_join(handle, self._buf, e.lib.DSM_SPAWN_MAX_RESULT, plen, slice_ms)
            if st != e.lib.DSM_ERR_TIMEOUT:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"workload {self.workload!r} still running", node=self.node, op="join")
        self.cluster._tasks.pop(self.tid, None)
        _lib.check(st, f"workload {self.workload!r} failed", node=self.node, op="run")
        return bytes(e.ffi.buffer(self._buf, plen[0]))

    def _abandon(self) -> None:
        """Leave the task to Cluster.close(), which joins it after stopping."""


_PRIVATE = object()
