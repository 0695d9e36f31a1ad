"""Workloads: placement, the argument and result text of C workloads,
:class:`Task` (the one future of a started workload) and :class:`Workloads`
(``c.workloads``: the registry, and running a workload on the nodes)."""
from __future__ import annotations

import contextlib
import difflib
import functools
import signal
import threading
import time
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from .errors import Cancelled, ClusterClosed, DsmError, InvalidArgument, NoHandler, PeerDead, Timeout
from .memory import GlobalBuffer, Memory
from .session import Session

if TYPE_CHECKING:  # imported lazily at run time (result imports matplotlib)
    from .result import Result


@functools.lru_cache(maxsize=None)
def stat_fields() -> Tuple[str, ...]:
    """Names of the scalar counters of ``dsm_stats_t`` (stats.h), in order;
    the per-handler arrays are left out."""
    ffi = _lib.ext().ffi
    return tuple(name for name, field in ffi.typeof("dsm_stats_t").fields
                 if field.type.kind == "primitive")


@dataclass(frozen=True)
class Param:
    """One parameter a workload declares (its C registration says so)."""

    name: str
    type: str            #: "u64", "addr" (a GlobalBuffer passes its address), "addr:DTYPE,..." or "str"
    default: Optional[str]  #: None when required
    help: str

    @property
    def dtypes(self) -> Optional[Tuple[str, ...]]:
        """The element dtypes an ``addr`` parameter is read as, when its type
        declares them (``"addr:uint64,int64"``), else None (any)."""
        kind, _, listed = self.type.partition(":")
        return tuple(listed.split(",")) if kind == "addr" and listed else None

    def __str__(self) -> str:
        default = "required" if self.default is None else f"default {self.default}"
        return f"{self.name} ({self.type}, {default}): {self.help}"


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload by name, with its help and parameters (``params`` is None
    for one registered without a description, e.g. by an old plugin)."""

    name: str
    help: str = ""
    params: Optional[Tuple[Param, ...]] = None

    def describe(self) -> str:
        """Multi-line help text: the workload, its parameters, the runner's keys."""
        lines = [f"{self.name}: {self.help}" if self.help else self.name]
        if self.params is None:
            lines.append("  (no parameter description registered)")
        else:
            lines += [f"  {p}" for p in self.params] or ["  (no parameters)"]
        lines.append("  placement (set with Placement(...) / --threads --pin --trustees): "
                     + ", ".join(PLACEMENT_KEYS))
        return "\n".join(lines)


def _c_str(ffi: Any, p: Any) -> Optional[str]:
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")


def workload_info(name: str) -> Optional[WorkloadInfo]:
    """The description of workload ``name`` known to this process's registry
    (the apps plugin's, and plugins loaded here), or None."""
    e = _lib.ext()
    _lib.load_apps()
    w = e.lib.dsm_workload_info(name.encode())
    if w == e.ffi.NULL:
        return None
    params = tuple(Param(_c_str(e.ffi, w.params[i].name) or "", _c_str(e.ffi, w.params[i].type) or "",
                         _c_str(e.ffi, w.params[i].fallback), _c_str(e.ffi, w.params[i].help) or "")
                   for i in range(w.n_params))
    return WorkloadInfo(name, _c_str(e.ffi, w.help) or "", params)


def registered_names() -> List[str]:
    """Names of the workloads registered in this process (the apps plugin's
    and plugins loaded here), in registration order."""
    e = _lib.ext()
    _lib.load_apps()
    names = []
    for i in range(1024):
        p = e.lib.dsm_registered_name(i)
        if p == e.ffi.NULL:
            break
        names.append(e.ffi.string(p).decode())
    return names


def unknown_workload(name: str) -> str:
    """Why ``name`` was not found: the known workloads, and the closest
    one ("did you mean")."""
    known = registered_names()
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown workload {name!r} (known: {', '.join(known)}){hint}"


#: Scratch memory larger than this is not made: the workload refuses the
#: parameters that asked for it (by name) instead.
_SCRATCH_MAX = 64 << 20


def _scratch_bytes(info: WorkloadInfo, params: Mapping[str, Any], nodes: int) -> Dict[str, int]:
    """The zeroed shared memory a run of ``info``'s workload with ``params``
    on ``nodes`` nodes needs for each ``addr`` parameter the caller left
    out (absent or 0), as the workload's C description says
    (``scratch_bytes`` in dsm/workload.h): a coherence workload's
    ``directory``, a plugin's counter. Sizes past the bound are left to the
    workload to refuse by name."""
    e = _lib.ext()
    w = e.lib.dsm_workload_info(info.name.encode())
    if w == e.ffi.NULL or w.scratch_bytes == e.ffi.NULL:
        return {}
    text = _encode_args({**params, "nodes": nodes})
    need: Dict[str, int] = {}
    for p in info.params or ():
        if p.type.partition(":")[0] != "addr" or params.get(p.name):
            continue
        size = int(w.scratch_bytes(p.name.encode(), text, len(text), nodes))
        if 0 < size <= _SCRATCH_MAX:
            need[p.name] = size
    return need


def _runner_keys() -> Tuple[str, ...]:
    e = _lib.ext()
    keys: List[str] = []
    while True:
        k = e.lib.dsm_workload_runner_key(len(keys))
        if k == e.ffi.NULL:
            return tuple(keys)
        keys.append(e.ffi.string(k).decode())


#: Keys a run sets from its Placement and node list; a workload parameter of
#: the same name would be overwritten, so run() refuses one.
PLACEMENT_KEYS = ("threads", "pin", "trustees", "memory_nodes", "rank_index", "nodes")


@dataclass
class Placement:
    """Where and how a workload runs (a dataclass: compares and prints by value).

    Args:
        threads: threads per node.
        pin: ``"compact"``, ``"scatter"`` or ``"none"`` (CPU pinning of threads).
        trustees: ``"dedicated"`` or ``"shared"`` (delegation workloads).
        memory_nodes: nodes that serve memory for the workload (default: all).
        nodes: nodes that run the workload (default: every live node).
    """

    PINS: ClassVar[Tuple[str, ...]] = ("compact", "scatter", "none")
    TRUSTEES: ClassVar[Tuple[str, ...]] = ("dedicated", "shared")

    threads: int = 1
    pin: str = "none"
    trustees: str = "shared"
    memory_nodes: Optional[List[int]] = None
    nodes: Optional[List[int]] = None

    def __post_init__(self) -> None:
        threads = self.threads
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or not 1 <= threads <= 256:
            raise InvalidArgument(f"threads must be an int in 1..256, not {threads!r}")
        if self.pin not in self.PINS:
            raise InvalidArgument(f"pin must be one of {self.PINS}, not {self.pin!r}")
        if self.trustees not in self.TRUSTEES:
            raise InvalidArgument(f"trustees must be one of {self.TRUSTEES}, not {self.trustees!r}")
        self.threads = int(threads)
        self.memory_nodes = None if self.memory_nodes is None else [int(n) for n in self.memory_nodes]
        self.nodes = None if self.nodes is None else [int(n) for n in self.nodes]

    def as_params(self) -> Dict[str, str]:
        """The placement keys of the workload argument text."""
        p = {"threads": str(self.threads), "pin": self.pin, "trustees": self.trustees}
        if self.memory_nodes is not None:
            p["memory_nodes"] = ",".join(map(str, self.memory_nodes))
        return p


def _encode_args(params: Mapping[str, Any]) -> bytes:
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


def _decode_result(text: bytes) -> List[Tuple[str, Union[int, float], str, str]]:
    """Parse workload result text: ``name value unit [:kind]`` per line. A
    value of digits alone is an integer figure (``dsm_result_add_u64``: a
    count, a handle, an address) and stays an exact int; any other is a
    float. The last word, when it starts with ``:``, is the figure's kind
    (``dsm_result_add_kind``, ``dsm_result_add_ratio``; see
    :data:`pydsm.result.KINDS`), else the kind is ``""``."""
    out: List[Tuple[str, Union[int, float], str, str]] = []
    for line in text.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if not parts:
            continue
        value: Union[int, float] = float("nan")
        if len(parts) > 1 and parts[1].isascii() and parts[1].isdigit():
            value = int(parts[1])
        elif len(parts) > 1:
            try:
                value = float(parts[1])
            except ValueError:
                pass
        rest = parts[2:]
        kind = rest.pop()[1:] if len(rest) and rest[-1].startswith(":") else ""
        out.append((parts[0], value, " ".join(rest), kind))
    return out


class Workloads(MappingABC[str, WorkloadInfo]):
    """The workloads of a cluster (``c.workloads``): a mapping of the
    registered workloads by name (``"kv" in c.workloads``,
    ``print(c.workloads["kv"].describe())``; calling it, ``c.workloads()``,
    gives the same as a dict), and the calls that run them."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __repr__(self) -> str:
        return f"<pydsm.Workloads {', '.join(self)}>"

    def _names(self) -> List[str]:
        return registered_names()

    def __getitem__(self, name: str) -> WorkloadInfo:
        if name not in self._names():
            raise KeyError(name)
        return workload_info(name) or WorkloadInfo(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __call__(self) -> Dict[str, WorkloadInfo]:
        """The workloads every dsmd registers, by name, with their help and
        parameters (``"echo" in c.workloads()``; ``print(info.describe())``)."""
        return {name: workload_info(name) or WorkloadInfo(name) for name in self._names()}

    def _start(self, node: int, workload: str, args: bytes) -> "_NodeRun":
        e = _lib.ext()
        ptask = e.ffi.new("dsm_task_t **")
        with self.session.in_use() as n:
            st = e.lib.dsm_spawn(n, node, workload.encode(), args, len(args), ptask)
        _lib.check(st, unknown_workload(workload) if st == e.lib.DSM_ERR_NO_HANDLER
                   else f"cannot start workload {workload!r}", node=node, op="spawn")
        tid = next(self.session.task_ids)
        self.session.tasks[tid] = ptask[0]
        return _NodeRun(self.session, tid, node, workload)

    def _check_known(self, workload: str) -> None:
        """A local cluster's daemons load the plugins this process loaded, so
        a name unknown here is unknown there: refuse it before starting."""
        if not isinstance(workload, str) or not workload:
            raise InvalidArgument(f"workload must be a name, not {workload!r}")
        if self.session.mode == "local" and workload not in registered_names():
            raise NoHandler(unknown_workload(workload), op="run")

    def _launch(self, workload: str, nodes: Sequence[int], args: Callable[[int], bytes], *,
                placement: Placement, params: Mapping[str, Any], progress: bool,
                owned: Sequence[GlobalBuffer] = ()) -> "Task":
        """Start ``workload`` on each of ``nodes`` (``args(i)`` the i-th
        one's argument text) as one :class:`Task`, which frees ``owned``
        once every node is done with it."""
        before = {n: self.session.stats(n) for n in nodes}
        started: List[_NodeRun] = []
        # Ctrl-C while the nodes start: every started run is recorded, then
        # the task is stopped as a running one would be.
        with _sigint_deferred() as interrupted:
            try:
                for i, node in enumerate(nodes):
                    started.append(self._start(node, workload, args(i)))
            except BaseException:
                for t in started:
                    t.cancel()
                if not started:
                    _free_all(owned)
                raise
        task = Task(self.session, workload, started, before, placement=placement, params=params,
                    progress=progress)
        task._owned = list(owned)
        if interrupted():
            task._stop()
            raise KeyboardInterrupt
        return task

    def spawn(self, node: int, workload: str, args: Union[bytes, Mapping[str, Any]] = b"") -> "Task":
        """Start a registered workload on one node with exactly ``args`` (a
        mapping of parameters, or argument text), nothing added; a
        :class:`Task` like :meth:`submit`'s."""
        node = self.session.check_node(node)
        self._check_known(workload)
        params: Mapping[str, Any] = {} if isinstance(args, (bytes, bytearray)) else args
        text = bytes(args) if isinstance(args, (bytes, bytearray)) else _encode_args(args)
        info = workload_info(workload)
        if info is not None:
            _check_buffer_dtypes(info, params)
        return self._launch(workload, [node], lambda i: text, placement=Placement(), params=params,
                            progress=False)

    def submit(self, workload: str, placement: Optional[Placement] = None, *,
               nodes: Optional[Sequence[int]] = None, progress: Optional[bool] = None,
               **params: Any) -> "Task":
        """Start a registered C workload on every node (or ``nodes``) and
        return at once with a :class:`Task`, a future of its
        :class:`pydsm.Result` (``done()``, ``result(timeout)``, ``cancel()``).

        ``params`` become the workload's ``key=value`` arguments (a
        GlobalBuffer passes its address). Each node also gets the placement
        keys, ``rank_index`` (its index among the running nodes) and
        ``nodes`` (how many run); a parameter of one of those names is
        refused. ``progress``: a progress bar of the nodes done while
        waiting (default: on a terminal and in notebooks).

        An ``addr`` parameter left out that the workload says needs shared
        memory (its C description's ``scratch_bytes``: kv's, gemm's,
        dataframe's and socialnet's ``directory`` under own or dir, a
        plugin's own) gets it made for the run: zeroed, on the first node,
        freed when every node is done.
        """
        placement = placement or Placement()
        taken = sorted(set(params) & set(PLACEMENT_KEYS))
        if taken:
            raise InvalidArgument(f"{workload}: {', '.join(taken)} set by the run itself "
                                  f"(use Placement({taken[0]}=...) or nodes=...), not as a parameter", op="run")
        self._check_known(workload)
        info = workload_info(workload)
        if info is not None:
            _check_args(info.name, _encode_args(params))
            _check_buffer_dtypes(info, params)
        if nodes is None:
            nodes = placement.nodes
        if nodes is None:
            nodes = self.session.live_nodes()
        ranks = [self.session.check_node(n) for n in nodes]
        if not ranks:
            raise InvalidArgument("no node to run on")
        if progress is None:
            from .progress import default_enabled
            progress = default_enabled()
        where = placement.as_params()
        sent: Dict[str, Any] = dict(params)
        owned: List[GlobalBuffer] = []
        for name, size in (_scratch_bytes(info, params, len(ranks)) if info is not None else {}).items():
            owned.append(Memory(self.session).zeros(size, np.uint8, node=ranks[0]))
            sent[name] = owned[-1]

        def args(i: int) -> bytes:
            return _encode_args({**sent, **where, "rank_index": i, "nodes": len(ranks)})

        return self._launch(workload, ranks, args, placement=placement, params=params, progress=bool(progress),
                            owned=owned)

    def run(self, workload: str, placement: Optional[Placement] = None, *,
            nodes: Optional[Sequence[int]] = None, timeout: Optional[float] = None,
            progress: Optional[bool] = None, **params: Any) -> "Result":
        """Run a workload and wait for its :class:`pydsm.Result`:
        ``submit(...).result(timeout)``. On ``timeout`` (seconds) or Ctrl-C
        the work is cancelled on the daemons before the exception is raised.
        """
        task = self.submit(workload, placement, nodes=nodes, progress=progress, **params)
        try:
            return task.result(timeout)
        except KeyboardInterrupt:   # also one that lands before result() waits
            task._stop()
            raise


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[Callable[[], bool]]:
    """Hold Ctrl-C back (main thread only) while a C handle changes hands, so
    that no task is started without being recorded, or joined without being
    forgotten; yields a function that says whether one came."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    got: List[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield lambda: bool(got)
    finally:
        signal.signal(signal.SIGINT, old)


def _check_args(name: str, args: bytes) -> None:
    """The C catalog's check of argument text (the one every daemon runs too)."""
    e = _lib.ext()
    _lib.load_apps()
    w = e.lib.dsm_workload_info(name.encode())
    if w == e.ffi.NULL:
        return
    msg = e.ffi.new("char[]", 512)
    st = e.lib.dsm_workload_check_args(w, args, len(args), msg, 512)
    _lib.check(st, e.ffi.string(msg).decode("utf-8", "replace"), op="run")


def _check_buffer_dtypes(info: WorkloadInfo, params: Mapping[str, Any]) -> None:
    """Refuse a GlobalBuffer whose dtype is not one its parameter declares:
    the workload would read its bytes as another type (a float64 counter
    given 64-bit integer adds reads back garbage)."""
    for p in info.params or ():
        value = params.get(p.name)
        if isinstance(value, GlobalBuffer) and p.dtypes and value.dtype.name not in p.dtypes:
            raise InvalidArgument(f"{info.name}: {p.name} is a {value.dtype} buffer; must be "
                                  f"{' or '.join(p.dtypes)} ({p.help})", op="run")


def _free_all(bufs: Sequence[GlobalBuffer]) -> None:
    """Free what a run owned, once no node uses it (a cluster already gone
    took it along)."""
    for buf in bufs:
        with contextlib.suppress(DsmError):
            buf.free()


def _merged_error(workload: str, errors: Mapping[int, DsmError]) -> DsmError:
    """One exception for failures on several nodes: each distinct message
    once, with the nodes it came from."""
    groups: Dict[Tuple[type, str], List[int]] = {}
    for node, exc in sorted(errors.items()):
        groups.setdefault((type(exc), exc.message or exc.c_message), []).append(node)
    parts = [f"{'node' if len(ns) == 1 else 'nodes'} {', '.join(map(str, ns))}: {msg}"
             for (_, msg), ns in groups.items()]
    first = next(iter(errors.values()))
    return type(first)(f"workload {workload!r} failed on " + "; ".join(parts),
                       status=first.status, status_name=first.status_name,
                       c_message=first.c_message, op="run")


class _NodeRun:
    """The part of a :class:`Task` on one node: its C task handle (kept in
    the session, so that Cluster.close() can stop and join what is left)."""

    def __init__(self, session: Session, tid: int, node: int, workload: str) -> None:
        self.session = session
        self.tid = tid
        self.node = node
        self.workload = workload
        self._buf: Any = None
        self._finished: Optional[Tuple[int, bytes]] = None
        # a finished join frees the C task: the calls other threads may make
        # on it meanwhile (wait_started, started, cancel) hold this lock too
        self._guard = threading.Lock()
        self._started = False

    def join(self, timeout: float) -> bytes:
        """Wait at most ``timeout`` seconds (in short slices, so Ctrl-C
        works) for the result text; Timeout leaves the run joinable."""
        e = _lib.ext()
        if self._finished is not None:       # joined when Ctrl-C came (see below)
            st, text = self._finished
            self._finished = None
            return self._outcome(st, text)
        handle = self.session.tasks.get(self.tid)
        if handle is None:
            raise ClusterClosed("the task was already joined or its cluster closed", node=self.node)
        if self._buf is None:
            self._buf = e.ffi.new("char[]", e.lib.DSM_SPAWN_MAX_RESULT)
        plen = e.ffi.new("size_t *")
        deadline = time.monotonic() + timeout
        text = b""
        while True:
            slice_ms = max(1, min(200, int((deadline - time.monotonic()) * 1000)))
            # A finished join frees the C task: its handle is dropped and its
            # outcome kept before Ctrl-C may land, so neither is lost.
            with _sigint_deferred() as interrupted, self._guard:
                st = e.lib.dsm_join(handle, self._buf, e.lib.DSM_SPAWN_MAX_RESULT, plen, slice_ms)
                if st != e.lib.DSM_ERR_TIMEOUT:
                    self.session.tasks.pop(self.tid, None)
                    text = bytes(e.ffi.buffer(self._buf, min(plen[0], e.lib.DSM_SPAWN_MAX_RESULT)))
                    if interrupted():
                        self._finished = (st, text)
            if interrupted():
                raise KeyboardInterrupt
            if st != e.lib.DSM_ERR_TIMEOUT:
                return self._outcome(st, text)
            if time.monotonic() >= deadline:
                raise Timeout(f"workload {self.workload!r} still running", node=self.node, op="join")

    def _outcome(self, st: int, text: bytes) -> bytes:
        """The result text, or the error (a failing workload may say why in its text)."""
        if st < 0:
            why = text.decode("utf-8", "replace").strip()
            if st == _lib.ext().lib.DSM_ERR_NO_HANDLER and not why:
                why = unknown_workload(self.workload)
            _lib.check(st, why or f"workload {self.workload!r} failed", node=self.node, op="run")
        return text

    def _ask_started(self, ask: Callable[[Any], bool]) -> bool:
        """Ask the C task (under the run's lock: a finished join frees it)
        whether the node has begun; a task already joined has."""
        with self._guard:
            handle = self.session.tasks.get(self.tid)
            self._started = handle is None or ask(handle)
        return self._started

    def wait_started(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds (in short slices, so Ctrl-C
        works) until the node has begun the workload (or ended it)."""
        lib = _lib.ext().lib
        deadline = time.monotonic() + timeout
        while not self._started:
            slice_ms = max(1, min(200, int((deadline - time.monotonic()) * 1000)))
            if not self._ask_started(lambda h: bool(lib.dsm_task_wait_started(h, slice_ms) == lib.DSM_OK)) \
                    and time.monotonic() >= deadline:
                return False
        return True

    def started(self) -> bool:
        """Whether the node has begun the workload (or ended it)."""
        lib = _lib.ext().lib
        return self._started or self._ask_started(lambda h: bool(lib.dsm_task_started(h)))

    def cancel(self) -> None:
        """Ask the node to stop the workload (it stops when it next polls its
        stop flag); harmless once done. A run not joined is left to
        Cluster.close(), which joins it after stopping."""
        with self._guard:
            handle = self.session.tasks.get(self.tid)
            if handle is not None:
                _lib.ext().lib.dsm_task_cancel(handle)


#: How long a cancelled run may take to stop before it is left to
#: Cluster.close() (workloads poll their stop flag far more often).
CANCEL_GRACE_S = 5.0


class Task:
    """A workload started on one node or several (from
    :meth:`Workloads.submit` or :meth:`Workloads.spawn`), in the manner of a
    ``concurrent.futures.Future``: :meth:`done`, :meth:`result`,
    :meth:`exception`, :meth:`cancel`. ``c.run`` is ``submit(...).result()``.

    Unlike a concurrent future, a ``result(timeout)`` that times out cancels
    the run on the daemons (a workload left running would hold their cores).
    """

    def __init__(self, session: Session, workload: str, runs: List[_NodeRun],
                 before: Dict[int, Dict[str, int]], *, placement: Placement,
                 params: Mapping[str, Any], progress: bool = False) -> None:
        self.session = session
        self.workload = workload
        self.nodes = [t.node for t in runs]
        self.placement = placement
        self.params = dict(params)
        self.progress = progress
        self._before = before
        self._pending = list(runs)
        self._outputs: Dict[int, bytes] = {}
        self._errors: Dict[int, DsmError] = {}
        self._t0 = time.monotonic()
        self._elapsed: Optional[float] = None
        self._cancelled = False
        self._result: Optional["Result"] = None
        #: what the run made for itself (a directory): freed when every node is done
        self._owned: List[GlobalBuffer] = []

    def __repr__(self) -> str:
        state = ("cancelled" if self._cancelled else "failed" if self._errors else "done") \
            if self.done() else "running"
        return (f"<pydsm.Task {self.workload} on nodes {self.nodes}: {state}, "
                f"{len(self.nodes) - len(self._pending)}/{len(self.nodes)} nodes finished, "
                f"{self._age():.1f} s>")

    def _age(self) -> float:
        return self._elapsed if self._elapsed is not None else time.monotonic() - self._t0

    def _poll(self, slice_s: float) -> None:
        """Join whatever finished, waiting at most about ``slice_s`` in all."""
        per = max(0.001, slice_s / max(1, len(self._pending)))
        for run in list(self._pending):
            try:
                out = run.join(timeout=per)
            except Timeout:
                continue
            except DsmError as exc:
                self._errors[run.node] = self._ended(run.node, exc)
            else:
                self._outputs[run.node] = out
            self._pending.remove(run)
        if not self._pending and self._elapsed is None:
            self._elapsed = time.monotonic() - self._t0
            _free_all(self._owned)
            self._owned.clear()

    def _ended(self, node: int, exc: DsmError) -> DsmError:
        """A node lost after a cancel: its daemon ended a workload that did
        not return within the daemon's grace (dsmd --cancel-grace-ms), the
        one safe way to stop a thread that ignores its stop flag."""
        if not (self._cancelled and isinstance(exc, PeerDead)):
            return exc
        text = self.session.daemon_log(node)
        line = next((ln for ln in reversed(text.splitlines()) if "ignored its stop flag" in ln), "")
        why = line.split(": ", 1)[-1] if line else "it did not return after the cancel"
        return Cancelled(f"the daemon ended the run by exiting: {why}", node=node, op="run")

    def done(self) -> bool:
        """True once every node finished (or failed, or was cancelled)."""
        if self._pending:
            self._poll(0.0)
        return not self._pending

    def running(self) -> bool:
        """True while the workload runs: it has begun on some node (the
        daemon says so as the run's thread starts) and not every node is
        done."""
        return not self.done() and any(run.started() for run in self._pending)

    def wait_started(self, timeout: Optional[float] = None) -> None:
        """Wait until every node has begun the workload (or ended it): what
        a caller that must act during the run (interrupt it, watch it) waits
        for. Timeout after ``timeout`` seconds leaves the run as it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for run in list(self._pending):
            while not run.wait_started(1.0 if deadline is None else max(0.0, deadline - time.monotonic())):
                if deadline is not None:
                    raise Timeout(f"workload {self.workload!r} not started on node {run.node} after "
                                  f"{timeout} s", node=run.node, op="run")

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> bool:
        """Ask every node still running the workload to stop. Returns False
        when it had already finished (nothing to cancel), else True."""
        if self.done():
            return False
        self._cancelled = True
        for run in self._pending:
            run.cancel()
        return True

    def _stop(self) -> None:
        """Cancel and wait (bounded) for the nodes to stop; what does not stop
        in time is left to Cluster.close()."""
        self.cancel()
        deadline = time.monotonic() + CANCEL_GRACE_S
        while self._pending and time.monotonic() < deadline:
            self._poll(0.2)
        # a node that did not stop may still use what the run owned: it is
        # left (to the cluster's end) rather than freed under it
        self._owned.clear()
        self._pending.clear()

    def _wait(self, timeout: Optional[float]) -> None:
        """Wait until every node is done (at most ``timeout`` seconds; then
        the run is cancelled and Timeout raised). Ctrl-C cancels the run on
        the daemons, then raises KeyboardInterrupt."""
        deadline = None if timeout is None else time.monotonic() + timeout
        progress = None
        try:
            # inside the try: Ctrl-C during the (slow, first-time) import of the
            # bar must stop the run too
            from .progress import bar
            progress = bar(total=len(self.nodes), desc=self.workload, unit="node", enabled=self.progress)
            progress.update(len(self.nodes) - len(self._pending))
            while self._pending:
                self._poll(0.2)
                progress.update(len(self.nodes) - len(self._pending) - progress.n)
                if deadline is not None and time.monotonic() >= deadline and self._pending:
                    running = [t.node for t in self._pending]
                    self._stop()
                    raise Timeout(f"workload {self.workload!r} still running on nodes {running} after "
                                  f"{timeout} s: cancelled", op="run")
        except KeyboardInterrupt:
            self._stop()
            raise
        except BaseException:
            if self._pending:
                self._stop()
            raise
        finally:
            if progress is not None:
                progress.close()

    def exception(self, timeout: Optional[float] = None) -> Optional[DsmError]:
        """Wait as :meth:`result` does; the exception the run failed with
        (one naming every failed node), or None if it succeeded."""
        self._wait(timeout)
        return _merged_error(self.workload, self._errors) if self._errors else None

    def result(self, timeout: Optional[float] = None) -> "Result":
        """Wait for the :class:`pydsm.Result` (at most ``timeout`` seconds;
        then the run is cancelled and Timeout raised). Ctrl-C while waiting
        cancels the run on the daemons, then raises KeyboardInterrupt. A
        failure on some nodes raises one exception naming them."""
        if self._result is not None:
            return self._result
        exc = self.exception(timeout)
        if exc is not None:
            raise exc
        self._result = self._collect()
        return self._result

    def _collect(self) -> "Result":
        from .result import Result

        after = {}
        for n in self.nodes:
            try:
                after[n] = self.session.stats(n)
            except DsmError:
                after[n] = self._before[n]
        figures = {n: _decode_result(self._outputs[n]) for n in self.nodes}
        stats = {n: {k: after[n][k] - self._before[n][k] for k in stat_fields()} for n in self.nodes}
        busy, cores = self.session.host_load(self.placement, len(self.nodes))
        return Result(self.workload, figures, stats, elapsed=self._age(),
                      params={k: (int(v) if isinstance(v, GlobalBuffer) else v) for k, v in self.params.items()},
                      placement=self.placement, busy_threads=busy, cores=cores)
