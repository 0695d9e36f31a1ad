"""LOCO's channel objects (``csrc/chan``) shared by Python processes: a
lock, a barrier, counters, a value one process publishes, a table of one
row per process, plain shared bytes, a broadcast of messages, a FIFO
queue and a key-value map, whose state lives in the participants' network
memory and is reached with one-sided operations.

The participants are Python processes: each process that joins a cluster
(the driver of :meth:`Cluster.local <pydsm.Cluster.local>`, or any
process that calls :meth:`Cluster.connect <pydsm.Cluster.connect>`) is a
node with a rank (``c.rank``), and a :class:`Group` names the ranks that
share objects. Every participant defines the same group and builds each
object under the same name and arguments; the build waits, bounded,
until all of them have built theirs::

    # in each of three processes, `ranks` being the three c.rank values
    with pydsm.Cluster.connect(coordinator, secret) as c:
        with c.chan.group("work", ranks) as g:
            jobs = g.queue("jobs", capacity=256)
            job = jobs.pop()                  # waits while empty, as queue.Queue.get
            more = jobs.pop_nowait()          # None if empty
            done = g.atomic("done")
            load = g.sst("load", dtype=np.float64, shape=4)
            load.store([0.5, 0, 0, 1])        # this process's row, pushed to all
            table = load.rows()               # every process's row, read locally
            buf = g.region("buf", nbytes=4096).view(np.float64)   # this process's copy, no copy
            with g.lock("tally"):
                ...                       # one process at a time
            g.barrier("end").wait()       # nobody goes on before all arrive

The daemons take no part: their memory holds no state of these objects,
and no daemon rank may be a participant. A group of daemons would need a
workload on every daemon to keep its endpoints alive and to enter
barriers and locks, and a kvstore puts a new key in the inserter's own
slots, so the driver's map would live in the driver anyway; Python
processes as the participants share the state with nothing else to run.

Each object is a context manager that destroys its endpoint at the end;
the participants must be done with an object before one destroys it (a
barrier first). Within a process, a close from another thread waits for
the calls under way on the object to return and makes every later call
raise :class:`~pydsm.StateError`; a call that waits (a queue's pop and
push, a ring's recv) does so in slices and ends with it within a slice,
as Ctrl-C ends it. Errors are :class:`pydsm.DsmError` subclasses that say
what the C core found: :class:`~pydsm.AlreadyExists` when a participant
built another kind of object under the name (a name collision),
:class:`~pydsm.InvalidArgument` when its object's shape differs (another
queue capacity; kvstore value size, slots or locks; owned_var owner, size
or mode; sst row size; ring sender or capacity; atomic host; region size),
with both shapes in the message, :class:`~pydsm.Timeout` naming the rank
that did not build its object within the bound. The C core compares
bytes, not numpy types: a kvstore of float64 values meets one of uint64
values.
"""
from __future__ import annotations

import hashlib
import re
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _lib
from .errors import DsmError, InvalidArgument, StateError
from .session import Session

#: Bytes of a full channel name (a group's prefix, '/', the object's name).
NAME_MAX = 127
#: Participants of one group.
MAX_PARTICIPANTS = 64
#: Bytes of an owned_var's value, or of an sst's row.
OWNED_MAX_BYTES = 4096

_U64 = (1 << 64) - 1
_NAME = re.compile(r"^[\x21-\x7e]+$")
_RANK = re.compile(r"rank (\d+)")

ValueLike = Union[int, float, Sequence[Any], "npt.NDArray[Any]"]


def _ms(timeout: Optional[float], what: str) -> int:
    """A timeout in seconds as C's milliseconds (None: 0, the C default)."""
    if timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgument(f"{what}: timeout must be a positive number of seconds or None, not {timeout!r}")
    return max(1, min(int(timeout * 1000), 0xFFFFFFFF))


def _u64(value: Any, what: str) -> int:
    """An int in 0..2**64-1 (Python or numpy integer), else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) <= _U64:
        raise InvalidArgument(f"{what} must be an int in 0..2**64-1, not {value!r}")
    return int(value)


def _shape(dtype: "npt.DTypeLike", shape: Any, what: str, most: int = OWNED_MAX_BYTES) \
        -> Tuple[np.dtype, Tuple[int, ...]]:
    """A value's dtype and shape (1..most bytes of plain numbers), else
    InvalidArgument."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise InvalidArgument(f"{what} holds plain numbers, not objects")
    try:
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what}'s shape must be an int or a tuple of ints, not {shape!r}") from None
    nbytes = _nbytes(dt, shp)
    if any(s < 0 for s in shp) or not 0 < nbytes <= most:
        raise InvalidArgument(f"{what} holds 1..{most} bytes, not {shp} of {dt} ({nbytes} B)")
    return dt, shp


def _nbytes(dt: np.dtype, shp: Tuple[int, ...]) -> int:
    """Bytes of a value of shape ``shp`` and dtype ``dt``."""
    return int(np.prod(shp, dtype=np.int64)) * dt.itemsize


def _value_type(dt: np.dtype, shp: Tuple[int, ...]) -> int:
    """A kvstore value's type as the nonzero 64-bit tag peers must match:
    ``dt.str`` and the dimensions (``"<f8"``, ``"<u4x2"``) as up to 8 ASCII
    bytes, else a hash of them with the top bit set (never ASCII)."""
    text = (dt.str + "".join(f"x{d}" for d in shp)).encode()
    if len(text) <= 8 and dt.fields is None:
        return int.from_bytes(text, "little")
    h = int.from_bytes(hashlib.blake2b(repr((dt.descr, shp)).encode(), digest_size=8).digest(), "little")
    return h | 1 << 63


def _value_type_text(tag: int) -> str:
    """What :func:`_value_type` packed, for an error: ``float64`` or
    ``uint32 of shape (2,)``."""
    raw = tag.to_bytes(8, "little").rstrip(b"\0")
    if tag == 0:
        return "untyped values (a C participant's)"
    if tag >> 63 or not raw.isascii():
        return "another dtype or shape"
    parts = raw.decode().split("x")
    try:
        name = np.dtype(parts[0]).name
    except TypeError:
        return "another dtype or shape"
    dims = tuple(int(d) for d in parts[1:])
    return f"{name} of shape {dims}" if dims else name


_VALUE_TYPES = re.compile(r"value_type (\d+) here; .*?value_type (\d+) at rank (\d+)")


def _as_value(value: Any, dt: np.dtype, shp: Tuple[int, ...], holds: str) -> "npt.NDArray[Any]":
    """value broadcast to ``shp`` of ``dt``, contiguous, else InvalidArgument
    saying what ``holds`` (e.g. "sst 'g/t' rows are")."""
    try:
        return np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=dt), shp))
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{holds} {shp} of {dt}: {exc}") from None

def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.startswith("/") or name.endswith("/") \
            or "//" in name:
        raise InvalidArgument(f"{what} must be printable ASCII without spaces, empty '/' parts or a leading "
                              f"or trailing '/', not {name!r}")
    return name


def _raise(st: int, what: str, op: str) -> None:
    """Raise for a failed C call: its status, with dsm_last_error's line
    (which names the rank when a peer is the cause; every caller clears it
    before the call, so that the line is that call's)."""
    if st >= 0:
        return
    e = _lib.ext()
    why = str(e.ffi.string(e.lib.dsm_last_error()).decode("utf-8", "replace"))
    m = _RANK.search(why)
    raise _lib.make_error(st, f"{what}: {why}" if why else what, node=int(m.group(1)) if m else None, op=op)


class _Object:
    """What every object shares: its group, name, C handle and destroy, and
    the guard that keeps the handle alive under the C calls that use it.
    Each call holds the handle through :meth:`_call`, counted in flight;
    :meth:`close` marks the object closing, waits for the calls in flight
    to return, then destroys the endpoint. So a close from another thread
    never frees what a call still uses: a call that comes later raises
    :class:`~pydsm.StateError`, and a call that waits does so in slices of
    :attr:`WAIT_SLICE_S` seconds, each its own C call, so that it ends
    with :class:`~pydsm.StateError` within a slice of the close."""

    _destroy_fn = ""
    kind = ""
    #: The longest one C call of a waiting call lasts (a queue's pop and
    #: push, a ring's recv): how soon a close or Ctrl-C ends the wait.
    WAIT_SLICE_S = 0.05

    def __init__(self, group: "Group", name: str, handle: Any) -> None:
        self.group = group
        self.name = name
        self._handle = handle
        # a plain lock: its with-block has no Python frame for a Ctrl-C to
        # land in while it is held
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0     # calls holding the handle now (close waits for them)
        self._closing = False
        group._chan._objects[id(self)] = self

    @property
    def full_name(self) -> str:
        """The channel's name: the group's prefix, '/', the object's name."""
        return f"{self.group.name}/{self.name}"

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _refused(self, op: str) -> StateError:
        return StateError(f"{op} on {self.kind} '{self.full_name}', which is closed", op=op)

    def _check_open(self, op: str) -> None:
        """StateError if the object is closed or closing (for the checks a
        call makes before it holds the handle)."""
        if self._closing or self._handle is None:
            raise self._refused(op)

    @contextmanager
    def _call(self, op: str) -> Iterator[Any]:
        """The handle for the block's C calls, counted in flight (and in the
        session's calls), with dsm_last_error cleared; StateError if the
        object is closed or closing."""
        with self._lock:
            if self._closing or self._handle is None:
                raise self._refused(op)
            h = self._handle
            self._inflight += 1
        try:
            with self.group.session.in_use():
                _lib.ext().lib.dsm_clear_last_error()
                yield h
        finally:
            with self._lock:
                self._inflight -= 1
                if self._closing:
                    self._idle.notify_all()

    def _slices(self, timeout: Optional[float], op: str) -> Iterator[int]:
        """The milliseconds of each C call of a wait: slices until
        ``timeout`` seconds passed (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + _ms(timeout, op) / 1000
        slice_ms = max(1, int(self.WAIT_SLICE_S * 1000))
        while True:
            if deadline is None:
                yield slice_ms
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return
            yield max(1, min(slice_ms, int(left * 1000)))

    def _quiesce(self) -> Any:
        """Mark the object closing, wait until no call holds the handle, and
        take it (None if it was closed already). Every C call under
        :meth:`_call` is bounded (a slice, or the operation's own timeout);
        the wait looks again each slice, so a wake-up lost to a Ctrl-C in
        the caller's bookkeeping costs a slice, not a hang."""
        with self._lock:
            self._closing = True
            while self._inflight:
                self._idle.wait(self.WAIT_SLICE_S)
            h, self._handle = self._handle, None
        return h

    def close(self) -> None:
        """Destroy this process's endpoint (idempotent) once the calls in
        flight on it have returned; later calls raise
        :class:`~pydsm.StateError`. The other participants must be done with
        the object: the memory it held here is reused."""
        h = self._quiesce()
        self.group._chan._objects.pop(id(self), None)
        if h is None or self.group.session.closed:
            return
        with self.group.session.in_use():
            getattr(_lib.ext().lib, self._destroy_fn)(h)

    def _take_at_close(self) -> Any:
        """At the cluster's close, the session drained (no C call is in
        flight, none can begin): mark the object closed, take the handle."""
        with self._lock:
            self._closing = True
            h, self._handle = self._handle, None
        return h

    def _destroy_at_close(self) -> bool:
        """At the cluster's close (the session drained): destroy directly.
        True if the node must stay (a view still holds its memory)."""
        h = self._take_at_close()
        if h is not None:
            getattr(_lib.ext().lib, self._destroy_fn)(h)
        return False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<pydsm.chan {self.kind} '{self.full_name}'{' closed' if self.closed else ''}>"


class AtomicVar(_Object):
    """atomic_var: one 64-bit word hosted by one participant; every access,
    the host's own too, is a fabric atomic (``g.atomic(name)``)."""

    _destroy_fn = "dsm_chan_atomic_destroy"
    kind = "atomic_var"

    def __init__(self, group: "Group", name: str, handle: Any, host: int) -> None:
        super().__init__(group, name, handle)
        #: the rank whose memory holds the word
        self.host = host

    def load(self) -> int:
        """The word's value."""
        e = _lib.ext()
        out = e.ffi.new("uint64_t *")
        with self._call("load") as h:
            _raise(e.lib.dsm_chan_atomic_load(h, out), f"atomic_var '{self.full_name}'", "load")
        return int(out[0])

    def fetch_add(self, value: int = 1) -> int:
        """Add ``value`` (modulo 2**64); the value before."""
        e = _lib.ext()
        out = e.ffi.new("uint64_t *")
        add = _u64(value, "value")
        with self._call("fetch_add") as h:
            _raise(e.lib.dsm_chan_atomic_fetch_add(h, add, out),
                   f"atomic_var '{self.full_name}'", "fetch_add")
        return int(out[0])

    def cas(self, expected: int, desired: int) -> int:
        """Compare and swap; the value before (== ``expected`` if it swapped)."""
        e = _lib.ext()
        out = e.ffi.new("uint64_t *")
        exp, des = _u64(expected, "expected"), _u64(desired, "desired")
        with self._call("cas") as h:
            _raise(e.lib.dsm_chan_atomic_cas(h, exp, des, out), f"atomic_var '{self.full_name}'", "cas")
        return int(out[0])


class OwnedVar(_Object):
    """owned_var: a numpy value (``shape`` of ``dtype``, up to 4096 bytes)
    that one participant, its owner, stores and every participant loads
    (``g.owned(name, owner=rank, ...)``). In ``"push"`` mode a store
    writes every participant's copy and a load is local; in ``"pull"``
    mode a load fetches the owner's copy. A load never returns a torn
    value: it reads again until the value's checksum agrees."""

    _destroy_fn = "dsm_chan_owned_destroy"
    kind = "owned_var"

    def __init__(self, group: "Group", name: str, handle: Any, owner: int, dtype: np.dtype,
                 shape: Tuple[int, ...]) -> None:
        super().__init__(group, name, handle)
        #: the rank that stores
        self.owner = owner
        self.dtype = dtype
        self.shape = shape

    @property
    def nbytes(self) -> int:
        return _nbytes(self.dtype, self.shape)

    def store(self, value: ValueLike) -> None:
        """Write the value (the owner only: :class:`~pydsm.StateError`
        elsewhere); in push mode returns once every copy is written."""
        if self.group.rank != self.owner:
            raise StateError(f"owned_var '{self.full_name}' is stored by its owner, rank {self.owner}, not by this "
                             f"process (rank {self.group.rank})", op="store")
        arr = _as_value(value, self.dtype, self.shape, f"owned_var '{self.full_name}' holds")
        e = _lib.ext()
        src = e.ffi.from_buffer(arr)
        with self._call("store") as h:
            _raise(e.lib.dsm_chan_owned_store(h, src, e.ffi.NULL),
                   f"owned_var '{self.full_name}'", "store")

    def load(self) -> "npt.NDArray[Any]":
        """The value, a new array of :attr:`shape` (a 0-d array for ``()``)."""
        out = np.empty(self.shape, dtype=self.dtype)
        e = _lib.ext()
        with self._call("load") as h:
            _raise(e.lib.dsm_chan_owned_load(h, e.ffi.from_buffer(out)),
                   f"owned_var '{self.full_name}'", "load")
        return out


class SharedRegion(_Object):
    """shared_region: ``nbytes`` bytes hosted by every participant, which
    any participant reads and writes one-sidedly at any rank's copy
    (``g.region(name, nbytes)``), and this process also through
    :meth:`view`, a numpy array over its own copy. There is no consistency
    beyond the fabric's: order the accesses with a barrier or a lock."""

    _destroy_fn = "dsm_chan_region_destroy"
    kind = "shared_region"

    def __init__(self, group: "Group", name: str, handle: Any, nbytes: int) -> None:
        super().__init__(group, name, handle)
        #: bytes of each participant's copy
        self.nbytes = nbytes
        self._keeper: Any = None    # while open: the pointer every view's buffer holds
        self._viewers: Any = None   # a weak reference to it: alive while a view is
        self._held: Any = None      # the endpoint of a closed region that views still hold

    def view(self, dtype: "npt.DTypeLike" = np.uint8, shape: Any = None, offset: int = 0) -> "npt.NDArray[Any]":
        """This process's copy as a numpy array over the memory itself (no
        copy): ``shape`` of ``dtype`` from byte ``offset`` (default: as many
        ``dtype`` as fit after it, one dimension). Its stores are stores
        into the copy that the other participants :meth:`read` and
        :meth:`write`, and their writes show in it without a read.

        A view keeps the memory it shows. Closing the region, or its group,
        while a view (or an array taken from it) is alive makes the
        region's methods raise :class:`~pydsm.StateError`, but this
        process's endpoint, its copy and its name stay until the last view
        is gone, so no other object reuses the bytes under a view; the
        view then still reads and writes this process's copy, which the
        others no longer do once they closed theirs. Closing the cluster
        while a view is alive keeps the node, and so the memory, until the
        process exits, and says so in a warning: drop the views before."""
        self._check_open("view")
        dt = np.dtype(dtype)
        if dt.hasobject or dt.itemsize == 0:
            raise InvalidArgument(f"a shared_region is viewed as plain numbers, not {dt}")
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or not 0 <= offset <= self.nbytes:
            raise InvalidArgument(f"shared_region '{self.full_name}' holds {self.nbytes} bytes: offset {offset!r} "
                                  "is outside")
        if shape is None:
            shp: Tuple[int, ...] = ((self.nbytes - int(offset)) // dt.itemsize,)
        else:
            try:
                shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(x) for x in shape)
            except (TypeError, ValueError):
                raise InvalidArgument(f"a view's shape must be an int or a tuple of ints, not {shape!r}") from None
            if any(x < 0 for x in shp) or int(offset) + _nbytes(dt, shp) > self.nbytes:
                raise InvalidArgument(f"shared_region '{self.full_name}' holds {self.nbytes} bytes: {shp} of {dt} "
                                      f"at offset {offset} is outside")
        e = _lib.ext()
        count = int(np.prod(shp, dtype=np.int64))
        # under the guard: a close meanwhile waits, then finds the keeper
        with self._call("view") as h:
            if self._keeper is None:
                base = e.lib.dsm_chan_region_mine(h, e.ffi.NULL)
                if base == e.ffi.NULL:
                    raise StateError(f"shared_region '{self.full_name}' has no copy here", op="view")
                self._keeper = e.ffi.gc(e.ffi.cast("uint8_t *", base), self._views_gone)
                self._viewers = weakref.ref(self._keeper)
            arr: "npt.NDArray[Any]" = np.frombuffer(e.ffi.buffer(self._keeper, self.nbytes), dtype=dt, count=count,
                                                    offset=int(offset)) if count else np.empty(0, dtype=dt)
        return arr.reshape(shp)

    def _viewed(self) -> bool:
        """Whether a view (not this object's own hold) still holds the copy."""
        return self._viewers is not None and self._viewers() is not None

    def _views_gone(self, _ptr: Any) -> None:
        """The last view is gone (cffi's destructor of the views' pointer):
        destroy the endpoint a close left to them, if the cluster is open."""
        h, self._held = self._held, None
        self.group._chan._held.pop(id(self), None)
        if h is None or self.group.session.closed:
            return
        try:
            with self.group.session.in_use():
                _lib.ext().lib.dsm_chan_region_destroy(h)
        except DsmError:  # pragma: no cover - the cluster closed meanwhile: its close saw the view
            self._held = h

    def close(self) -> None:
        """Destroy this process's endpoint (idempotent) once the calls in
        flight on it have returned, at once or, while views hold its copy,
        once the last is gone (see :meth:`view`)."""
        h = self._quiesce()
        self.group._chan._objects.pop(id(self), None)
        if h is None:
            return
        if self._keeper is not None:
            self._held = h
            self.group._chan._held[id(self)] = self
            self._keeper = None   # without views, the destructor destroys it now
            return
        if not self.group.session.closed:
            with self.group.session.in_use():
                _lib.ext().lib.dsm_chan_region_destroy(h)

    def _destroy_at_close(self) -> bool:
        h = self._take_at_close()
        if h is None:
            h = self._held
        self._held = None
        self._keeper = None       # the destructor, if it runs now, finds nothing held
        if h is not None and self._viewed():
            self._held = h        # views still read and write it: the node stays
            return True
        if h is not None:
            _lib.ext().lib.dsm_chan_region_destroy(h)
        return False

    def _span(self, rank: int, offset: Any, n: int, op: str) -> Tuple[int, int]:
        i = self.group._index(rank, "rank")
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or not 0 <= int(offset) or \
                int(offset) + n > self.nbytes:
            raise InvalidArgument(f"shared_region '{self.full_name}' holds {self.nbytes} bytes: {op} of {n} at "
                                  f"offset {offset!r} is outside")
        return i, int(offset)

    def write(self, rank: int, data: Union[bytes, bytearray, memoryview, "npt.NDArray[Any]"],
              offset: int = 0) -> None:
        """Write ``data`` (bytes or an array's bytes) into rank ``rank``'s
        copy at byte ``offset``; returns once the write completed."""
        if isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data).tobytes()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
        else:
            raise InvalidArgument(f"a shared_region is written bytes or numpy arrays, not {type(data).__name__}")
        i, off = self._span(rank, offset, len(raw), "a write")
        if not raw:
            return
        with self._call("write") as h:
            _raise(_lib.ext().lib.dsm_chan_region_put(h, i, off, raw, len(raw)),
                   f"shared_region '{self.full_name}'", "write")

    def read(self, rank: int, offset: int = 0, count: Optional[int] = None,
             dtype: "npt.DTypeLike" = np.uint8) -> "npt.NDArray[Any]":
        """``count`` items of ``dtype`` (default: to the end of the region)
        from rank ``rank``'s copy at byte ``offset``, as a new array."""
        dt = np.dtype(dtype)
        if dt.hasobject or dt.itemsize == 0:
            raise InvalidArgument(f"a shared_region is read as plain numbers, not {dt}")
        if count is None:
            off = offset if isinstance(offset, (int, np.integer)) and not isinstance(offset, bool) else 0
            count = max(0, self.nbytes - int(off)) // dt.itemsize
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise InvalidArgument(f"count must be a non-negative int, not {count!r}")
        out = np.empty(int(count), dtype=dt)
        i, off = self._span(rank, offset, out.nbytes, "a read")
        if out.nbytes:
            e = _lib.ext()
            with self._call("read") as h:
                _raise(e.lib.dsm_chan_region_get(h, i, off, e.ffi.from_buffer(out), out.nbytes),
                       f"shared_region '{self.full_name}'", "read")
        return out


class SST(_Object):
    """sst: a shared state table, one row (``shape`` of ``dtype``, up to
    4096 bytes) per participant (``g.sst(name, dtype, shape)``). Each
    participant writes only its own row, with :meth:`store`, which writes
    every participant's copy; reads are local, and a row is never seen
    torn (a row over 8 bytes is read again until its checksum agrees)."""

    _destroy_fn = "dsm_chan_sst_destroy"
    kind = "sst"

    def __init__(self, group: "Group", name: str, handle: Any, dtype: np.dtype, shape: Tuple[int, ...]) -> None:
        super().__init__(group, name, handle)
        self.dtype = dtype
        #: one row's shape
        self.shape = shape

    @property
    def row_nbytes(self) -> int:
        return _nbytes(self.dtype, self.shape)

    def store(self, row: ValueLike) -> None:
        """Write this process's row and push it to every participant;
        returns once every copy is written."""
        arr = _as_value(row, self.dtype, self.shape, f"sst '{self.full_name}' rows are")
        e = _lib.ext()
        with self._call("store") as h:
            _raise(e.lib.dsm_chan_sst_store_mine(h, e.ffi.from_buffer(arr)), f"sst '{self.full_name}'", "store")
            _raise(e.lib.dsm_chan_sst_push_broadcast(h, e.ffi.NULL), f"sst '{self.full_name}'", "store")

    def read(self, rank: int) -> "npt.NDArray[Any]":
        """Rank ``rank``'s row as this process's copy holds it, a new array."""
        i = self.group._index(rank, "rank")
        out = np.empty(self.shape, dtype=self.dtype)
        e = _lib.ext()
        with self._call("read") as h:
            _raise(e.lib.dsm_chan_sst_read(h, i, e.ffi.from_buffer(out)), f"sst '{self.full_name}'",
                   "read")
        return out

    def rows(self) -> "npt.NDArray[Any]":
        """Every participant's row, in rank order: an array of
        ``(len(group.ranks),) + shape``."""
        return np.stack([self.read(r) for r in self.group.ranks])

    def __getitem__(self, rank: int) -> "npt.NDArray[Any]":
        return self.read(rank)


class Barrier(_Object):
    """barrier: one thread per participant calls :meth:`wait`; nobody
    leaves round k before every participant has entered it, and what each
    wrote before it is visible to all after (``g.barrier(name)``)."""

    _destroy_fn = "dsm_chan_barrier_destroy"
    kind = "barrier"

    def wait(self, timeout: Optional[float] = None) -> None:
        """Enter the next round and wait for everyone; :class:`~pydsm.Timeout`
        naming a participant that did not arrive within ``timeout`` seconds
        (None: the cluster's op timeout)."""
        ms = _ms(timeout, "barrier wait")
        with self._call("wait") as h:
            _raise(_lib.ext().lib.dsm_chan_barrier_wait(h, ms), f"barrier '{self.full_name}'", "wait")


class TicketLock(_Object):
    """ticket_lock: a fair lock across the participants (``g.lock(name)``),
    used as a context manager (``with lock: ...``) or with
    :meth:`acquire`/:meth:`release` on one thread. Threads of one process
    queue locally first, and a release hands over to one of them at most
    4 times in a row before it serves the next process."""

    _destroy_fn = "dsm_chan_lock_destroy"
    kind = "ticket_lock"

    def __init__(self, group: "Group", name: str, handle: Any) -> None:
        super().__init__(group, name, handle)
        self._holder: Optional[int] = None

    def acquire(self, timeout: Optional[float] = None) -> None:
        """Wait for the lock. A :class:`~pydsm.Timeout` (after ``timeout``
        seconds, None: the cluster's op timeout) leaves the lock broken for
        every participant (a ticket cannot be handed back): choose a bound
        no healthy holder reaches."""
        ms = _ms(timeout, "lock acquire")
        self._check_open("acquire")
        if self._holder == threading.get_ident():
            raise StateError(f"ticket_lock '{self.full_name}' is held by this thread already (it is not "
                             "re-entrant)", op="acquire")
        with self._call("acquire") as h:
            _raise(_lib.ext().lib.dsm_chan_lock_acquire(h, ms), f"ticket_lock '{self.full_name}'", "acquire")
        self._holder = threading.get_ident()

    def release(self) -> None:
        """Release the lock, after a fence that makes this thread's writes
        visible to the next holder."""
        self._check_open("release")
        if self._holder != threading.get_ident():
            raise StateError(f"ticket_lock '{self.full_name}' is released by a thread that does not hold it",
                             op="release")
        e = _lib.ext()
        with self._call("release") as h:
            self._holder = None
            _raise(e.lib.dsm_chan_lock_release(h, e.lib.DSM_CHAN_FENCE_THREAD), f"ticket_lock '{self.full_name}'",
                   "release")

    @property
    def held(self) -> bool:
        """True while a thread of this process holds it through this object."""
        return self._holder is not None

    def __enter__(self) -> "TicketLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class Ring(_Object):
    """ringbuffer: one participant, the sender, broadcasts messages (bytes
    or numpy arrays of 1..capacity/4 bytes) to every other participant,
    who receive each in order (``g.ring(name, sender=rank)``). The sender
    waits while the slowest receiver lags by the whole capacity. A
    receiver receives on one thread."""

    _destroy_fn = "dsm_chan_ring_destroy"
    kind = "ringbuffer"

    def __init__(self, group: "Group", name: str, handle: Any, sender: int, capacity: int) -> None:
        super().__init__(group, name, handle)
        #: the rank that sends
        self.sender = sender
        self.capacity = capacity
        self._buf: Any = None

    @property
    def max_message(self) -> int:
        """Bytes of the longest message."""
        return self.capacity // 4

    def send(self, data: Union[bytes, bytearray, memoryview, "npt.NDArray[Any]"],
             timeout: Optional[float] = None) -> None:
        """Broadcast ``data`` (its bytes; the sender only); :class:`~pydsm.Timeout`
        naming the slowest receiver if it stayed a whole capacity behind
        for ``timeout`` seconds (None: the cluster's op timeout)."""
        if self.group.rank != self.sender:
            raise StateError(f"ringbuffer '{self.full_name}' is sent on by rank {self.sender}, not by this process "
                             f"(rank {self.group.rank})", op="send")
        if isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data).tobytes()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
        else:
            raise InvalidArgument(f"a ringbuffer sends bytes or numpy arrays, not {type(data).__name__}")
        if not 1 <= len(raw) <= self.max_message:
            raise InvalidArgument(f"ringbuffer '{self.full_name}' sends 1..{self.max_message} bytes a message, "
                                  f"not {len(raw)}")
        ms = _ms(timeout, "send")
        with self._call("send") as h:
            _raise(_lib.ext().lib.dsm_chan_ring_send(h, raw, len(raw), ms),
                   f"ringbuffer '{self.full_name}'", "send")

    def recv(self, timeout: Optional[float] = None, dtype: "Optional[npt.DTypeLike]" = None) -> Any:
        """The next message (receivers only): bytes, or with ``dtype`` a
        numpy array of it; :class:`~pydsm.Timeout` if none came within
        ``timeout`` seconds (None: the cluster's op timeout). It waits in
        slices (see :class:`SharedQueue`): a close of the ring from another
        thread ends the wait with :class:`~pydsm.StateError`, Ctrl-C
        within a slice."""
        if self.group.rank == self.sender:
            raise StateError(f"ringbuffer '{self.full_name}' is received by the ranks other than its sender, "
                             f"{self.sender}", op="recv")
        ms = _ms(timeout, "recv") or int(self.group.session.op_timeout_ms) or 5000
        e = _lib.ext()
        if self._buf is None:
            self._buf = e.ffi.new("uint8_t[]", self.max_message)
        n = e.ffi.new("size_t *")
        st = e.lib.DSM_ERR_TIMEOUT
        for ms_slice in self._slices(ms / 1000, "recv"):
            with self._call("recv") as h:
                st = e.lib.dsm_chan_ring_recv(h, self._buf, self.max_message, n, ms_slice)
                # a timeout the C core did not explain is an empty slice
                if st != e.lib.DSM_ERR_TIMEOUT or e.ffi.string(e.lib.dsm_last_error()):
                    _raise(st, f"ringbuffer '{self.full_name}'", "recv")
                    raw = bytes(e.ffi.buffer(self._buf, int(n[0])))
                    return raw if dtype is None else np.frombuffer(raw, dtype=dtype).copy()
        raise _lib.make_error(st, f"ringbuffer '{self.full_name}': no message for {ms / 1000} s", op="recv")


class SharedQueue(_Object):
    """shared_queue: a FIFO of 64-bit unsigned values shared by the
    participants (``g.queue(name, capacity)``); each pop matches exactly
    one push. :meth:`pop` waits while the queue is empty, as
    :meth:`queue.Queue.get` does; :meth:`pop_nowait` does not.

    A waiting call wakes when the queue (or its group, or the cluster) is
    closed from another thread, with :class:`~pydsm.StateError` (or
    :class:`~pydsm.ClusterClosed`): the C core waits in slices of
    :attr:`WAIT_SLICE_S` seconds and the close waits for the slice in
    flight before it destroys the queue. Ctrl-C (``KeyboardInterrupt``)
    ends a wait within a slice too, and leaves the queue usable."""

    _destroy_fn = "dsm_chan_queue_destroy"
    kind = "shared_queue"

    def __init__(self, group: "Group", name: str, handle: Any, capacity: int) -> None:
        super().__init__(group, name, handle)
        self.capacity = capacity
        #: threads of this process in :meth:`pop` now
        self.waiting = 0

    def push(self, value: int, timeout: Optional[float] = None) -> None:
        """Append ``value``; :class:`~pydsm.Busy` if the queue stayed full
        for ``timeout`` seconds (None: the cluster's op timeout)."""
        v = _u64(value, "value")
        e = _lib.ext()
        ms = _ms(timeout, "push") or int(self.group.session.op_timeout_ms) or 5000
        st = e.lib.DSM_ERR_BUSY
        for ms_slice in self._slices(ms / 1000, "push"):
            with self._call("push") as h:
                st = e.lib.dsm_chan_queue_push(h, v, ms_slice)
                if st != e.lib.DSM_ERR_BUSY:
                    _raise(st, f"shared_queue '{self.full_name}'", "push")
                    return
        raise _lib.make_error(st, f"shared_queue '{self.full_name}': full for {ms / 1000} s", op="push")

    def pop(self, timeout: Optional[float] = None) -> int:
        """The oldest value, waiting while the queue is empty, as
        :meth:`queue.Queue.get` does: with ``timeout`` None until a value
        comes, else at most ``timeout`` seconds, then
        :class:`~pydsm.Timeout`. A close of the queue or its group from
        another thread ends the wait with :class:`~pydsm.StateError`."""
        e = _lib.ext()
        out = e.ffi.new("uint64_t *")
        with self._lock:
            self.waiting += 1
        try:
            for ms in self._slices(timeout, "pop"):
                with self._call("pop") as h:
                    st = e.lib.dsm_chan_queue_pop_wait(h, out, ms)
                    # a timeout the C core did not explain is an empty slice
                    if st == e.lib.DSM_OK:
                        return int(out[0])
                    if st != e.lib.DSM_ERR_TIMEOUT or e.ffi.string(e.lib.dsm_last_error()):
                        _raise(st, f"shared_queue '{self.full_name}'", "pop")
        finally:
            with self._lock:
                self.waiting -= 1
        raise _lib.make_error(e.lib.DSM_ERR_TIMEOUT, f"shared_queue '{self.full_name}': empty for {timeout} s",
                              op="pop")

    def pop_nowait(self) -> Optional[int]:
        """The oldest value, or None if the queue is empty now."""
        e = _lib.ext()
        out = e.ffi.new("uint64_t *")
        got = e.ffi.new("int *")
        with self._call("pop_nowait") as h:
            _raise(e.lib.dsm_chan_queue_pop(h, out, got, 0), f"shared_queue '{self.full_name}'", "pop_nowait")
        return int(out[0]) if got[0] else None

    def extend(self, values: Any, timeout: Optional[float] = None) -> None:
        """Push each of ``values`` (an iterable or array of uint64) in order."""
        arr = np.asarray(values)
        if arr.dtype.kind not in "ui" or (arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0):
            raise InvalidArgument(f"shared_queue '{self.full_name}' holds uint64 values, not {arr.dtype} "
                                  "(or negative ones)")
        for v in arr.astype(np.uint64).ravel().tolist():
            self.push(v, timeout)

    def drain(self, limit: Optional[int] = None) -> "npt.NDArray[np.uint64]":
        """Pop without waiting until the queue is empty (or ``limit``
        values); what was popped, in order, as a uint64 array."""
        out: List[int] = []
        while limit is None or len(out) < limit:
            v = self.pop_nowait()
            if v is None:
                break
            out.append(v)
        return np.array(out, dtype=np.uint64)


class KVStore(_Object):
    """kvstore: a linearizable map of 64-bit unsigned keys to fixed-size
    values shared by the participants (``g.kvstore(name)``), with
    ``kv[k]``, ``kv[k] = v``, ``del kv[k]``, ``k in kv`` and :meth:`get`.
    A value is a uint64 (an int) by default, or ``shape`` of ``dtype``
    (a numpy array, up to 256 bytes) chosen at the build; one over 8 bytes
    is never read torn (its slot's checksum covers it). A new key lands in
    the inserting process's slots (:class:`~pydsm.OutOfMemory` once its
    ``slots`` are taken); a get reads the value where it lives, with no
    lock."""

    _destroy_fn = "dsm_chan_kv_destroy"
    kind = "kvstore"

    def __init__(self, group: "Group", name: str, handle: Any, slots: int, locks: int, dtype: np.dtype,
                 shape: Tuple[int, ...]) -> None:
        super().__init__(group, name, handle)
        self.slots = slots
        self.locks = locks
        #: a value's dtype and shape
        self.dtype = dtype
        self.shape = shape
        self._word = dtype == np.dtype(np.uint64) and shape == ()

    @property
    def value_nbytes(self) -> int:
        return _nbytes(self.dtype, self.shape)

    def _value(self, value: Any) -> Any:
        """value as the C call's bytes (a uint64 for the default values)."""
        if self._word:
            return _lib.ext().ffi.new("uint64_t *", _u64(value, "value"))
        arr = _as_value(value, self.dtype, self.shape, f"kvstore '{self.full_name}' values are")
        return _lib.ext().ffi.from_buffer(arr)

    def _out(self, raw: "npt.NDArray[Any]") -> Any:
        return int(raw.view(np.uint64)[0]) if self._word else raw.view(self.dtype).reshape(self.shape).copy()

    def put(self, key: int, value: Any) -> None:
        """Insert or update (``value``: an int in 0..2**64-1 by default, else
        anything that broadcasts to the values' shape and dtype)."""
        k, v = _u64(key, "key"), self._value(value)
        with self._call("put") as h:
            _raise(_lib.ext().lib.dsm_chan_kv_put(h, k, v), f"kvstore '{self.full_name}' key {k}", "put")

    def get(self, key: int, default: Any = None) -> Any:
        """The value of ``key`` (an int, or a new array), or ``default`` if
        it has none."""
        k = _u64(key, "key")
        e = _lib.ext()
        raw = np.empty(max(8, self.value_nbytes), dtype=np.uint8)
        found = e.ffi.new("int *")
        with self._call("get") as h:
            _raise(e.lib.dsm_chan_kv_get(h, k, e.ffi.from_buffer(raw), found),
                   f"kvstore '{self.full_name}' key {k}", "get")
        return self._out(raw[:self.value_nbytes]) if found[0] else default

    def delete(self, key: int) -> bool:
        """Remove ``key``; whether it was there."""
        k = _u64(key, "key")
        e = _lib.ext()
        found = e.ffi.new("int *")
        with self._call("delete") as h:
            _raise(e.lib.dsm_chan_kv_delete(h, k, found), f"kvstore '{self.full_name}' key {k}",
                   "delete")
        return bool(found[0])

    def get_many(self, keys: Any) -> Tuple["npt.NDArray[Any]", "npt.NDArray[np.bool_]"]:
        """Values and found flags of ``keys`` (an array of uint64), as two
        arrays: ``keys.shape`` (then the values' shape) of the values'
        dtype (zero where not found), and of bool. The reads of up to 128
        keys are in flight at once."""
        ks = np.asarray(keys)
        if ks.dtype.kind not in "ui" or (ks.size and ks.dtype.kind == "i" and int(ks.min()) < 0):
            raise InvalidArgument(f"kvstore keys are uint64, not {ks.dtype} (or negative ones)")
        flat = np.ascontiguousarray(ks.astype(np.uint64).ravel())
        e = _lib.ext()
        chunk = int(e.lib.DSM_CHAN_ACK_BITS)
        values = np.zeros((flat.size,) + self.shape, dtype=self.dtype)
        found = np.zeros(flat.size, dtype=np.intc)
        with self._call("get_many") as h:
            for at in range(0, flat.size, chunk):
                n = min(chunk, flat.size - at)
                e.lib.dsm_clear_last_error()
                _raise(e.lib.dsm_chan_kv_get_many(h, e.ffi.from_buffer("uint64_t[]", flat[at:at + n]), n,
                                                  e.ffi.from_buffer(values[at:at + n]),
                                                  e.ffi.from_buffer("int[]", found[at:at + n])),
                       f"kvstore '{self.full_name}'", "get_many")
        return values.reshape(ks.shape + self.shape), found.astype(bool).reshape(ks.shape)

    def _keys(self, keys: Any) -> "npt.NDArray[np.uint64]":
        ks = np.asarray(keys)
        if ks.dtype.kind not in "ui" or (ks.size and ks.dtype.kind == "i" and int(ks.min()) < 0):
            raise InvalidArgument(f"kvstore keys are uint64, not {ks.dtype} (or negative ones)")
        return np.ascontiguousarray(ks.astype(np.uint64).ravel())

    def put_many(self, keys: Any, values: Any) -> None:
        """Insert or update ``keys`` (an array of uint64) with ``values``
        (broadcast to ``keys.shape`` then the values' shape). Up to 128
        at a time take their locks together and write host by host, where
        :meth:`put` pays its round trips for each; a key given twice ends
        with its last value."""
        flat = self._keys(keys)
        try:
            vals = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=self.dtype),
                                                        np.shape(keys) + self.shape)).reshape((flat.size,) + self.shape)
        except (TypeError, ValueError) as err:
            raise InvalidArgument(f"kvstore '{self.full_name}' values are {self.shape} of {self.dtype} for each key: "
                                  f"{err}") from None
        e = _lib.ext()
        chunk = int(e.lib.DSM_CHAN_ACK_BITS)
        with self._call("put_many") as h:
            for at in range(0, flat.size, chunk):
                n = min(chunk, flat.size - at)
                e.lib.dsm_clear_last_error()
                _raise(e.lib.dsm_chan_kv_put_many(h, e.ffi.from_buffer("uint64_t[]", flat[at:at + n]), n,
                                                  e.ffi.from_buffer(vals[at:at + n])),
                       f"kvstore '{self.full_name}'", "put_many")

    def delete_many(self, keys: Any) -> "npt.NDArray[np.bool_]":
        """Remove ``keys`` (an array of uint64), up to 128 at a time as
        :meth:`put_many` does; whether each was there (of a key given
        twice, the first)."""
        flat = self._keys(keys)
        e = _lib.ext()
        chunk = int(e.lib.DSM_CHAN_ACK_BITS)
        found = np.zeros(flat.size, dtype=np.intc)
        with self._call("delete_many") as h:
            for at in range(0, flat.size, chunk):
                n = min(chunk, flat.size - at)
                e.lib.dsm_clear_last_error()
                _raise(e.lib.dsm_chan_kv_delete_many(h, e.ffi.from_buffer("uint64_t[]", flat[at:at + n]), n,
                                                     e.ffi.from_buffer("int[]", found[at:at + n])),
                       f"kvstore '{self.full_name}'", "delete_many")
        return found.astype(bool).reshape(np.shape(keys))

    def __getitem__(self, key: int) -> Any:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: int, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: int) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= int(key) <= _U64:
            return False
        return self.get(int(key)) is not None

    def __len__(self) -> int:
        """Keys in this process's index (approximate while others write)."""
        with self._call("len") as h:
            return int(_lib.ext().lib.dsm_chan_kv_count(h))


class Group:
    """The participants (ranks of Python processes) of the objects named
    ``"<name>/..."`` (``c.chan.group(name, ranks)``). Every participant
    defines the same group; each object is built by every participant
    under the same name and arguments, and the build waits (at most
    ``timeout`` seconds, None: the cluster's join timeout) until all have
    built theirs. Participant roles (an atomic's host, an owned_var's
    owner) are ranks."""

    def __init__(self, chan: "Chan", name: str, ranks: Tuple[int, ...], rank: int,
                 timeout: Optional[float]) -> None:
        self._chan = chan
        self.session = chan.session
        self.name = name
        #: the participants, ascending
        self.ranks = ranks
        #: this process's rank
        self.rank = rank
        self.timeout = timeout
        self._closed = False

    def __repr__(self) -> str:
        return f"<pydsm.chan.Group '{self.name}' ranks={list(self.ranks)}{' closed' if self._closed else ''}>"

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Destroy this group's objects still open here (the others must be
        done with them) and forget the group."""
        if self._closed:
            return
        self._closed = True
        for obj in [o for o in self._chan._objects.values() if o.group is self][::-1]:
            obj.close()
        if not self.session.closed:
            with self.session.in_use() as n:
                _lib.ext().lib.dsm_chan_group(n, self.name.encode(), _lib.ext().ffi.NULL, 0)
        self._chan._groups.pop(self.name, None)

    # ------------------------------------------------------------ helpers
    def _index(self, rank: Any, role: str) -> int:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or int(rank) not in self.ranks:
            raise InvalidArgument(f"{role} must be a rank of group '{self.name}' ({list(self.ranks)}), not {rank!r}")
        return self.ranks.index(int(rank))

    def _build(self, kind: str, name: str, fn: str, *args: Any, create: str = "create") -> Any:
        if self._closed:
            raise StateError(f"group '{self.name}' is closed", op=kind)
        full = f"{self.name}/{_check_name(name, f'the {kind} name')}"
        if len(full) > NAME_MAX:
            raise InvalidArgument(f"{kind} name '{full}' is longer than {NAME_MAX} bytes")
        e = _lib.ext()
        out = e.ffi.new(f"dsm_chan_{fn}_t **")
        ms = _ms(self.timeout, f"group '{self.name}'")
        with self.session.in_use() as n:
            e.lib.dsm_clear_last_error()
            st = getattr(e.lib, f"dsm_chan_{fn}_{create}")(n, full.encode(), *args, ms, out)
            _raise(st, f"cannot build {kind} '{full}' of ranks {list(self.ranks)}", "create")
        return out[0]

    # ------------------------------------------------------------ objects
    def atomic(self, name: str, host: Optional[int] = None) -> AtomicVar:
        """An :class:`AtomicVar` (starting at 0) in rank ``host``'s memory
        (default: the lowest rank)."""
        host = self.ranks[0] if host is None else host
        i = self._index(host, "host")
        return AtomicVar(self, name, self._build("atomic_var", name, "atomic", i), int(host))

    def owned(self, name: str, owner: int, dtype: "npt.DTypeLike" = np.float64, shape: Any = (),
              mode: str = "push") -> OwnedVar:
        """An :class:`OwnedVar` of ``shape`` and ``dtype`` (zero at first)
        that rank ``owner`` stores; ``mode`` ``"push"`` or ``"pull"``."""
        i = self._index(owner, "owner")
        dt, shp = _shape(dtype, shape, "an owned_var")
        nbytes = _nbytes(dt, shp)
        if mode not in ("push", "pull"):
            raise InvalidArgument(f"mode must be 'push' or 'pull', not {mode!r}")
        lib = _lib.ext().lib
        m = lib.DSM_CHAN_PUSH if mode == "push" else lib.DSM_CHAN_PULL
        return OwnedVar(self, name, self._build("owned_var", name, "owned", i, nbytes, m), int(owner), dt, shp)

    def region(self, name: str, nbytes: int) -> SharedRegion:
        """A :class:`SharedRegion` of ``nbytes`` bytes (zero at first) on
        every participant; it lives in each process's channel arena
        (``DSM_CHAN_ARENA_MB``, default 8 MiB: :class:`~pydsm.OutOfMemory`
        past it)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or not 0 < nbytes < 1 << 40:
            raise InvalidArgument(f"a shared_region holds a positive number of bytes, not {nbytes!r}")
        return SharedRegion(self, name, self._build("shared_region", name, "region", int(nbytes)), int(nbytes))

    def sst(self, name: str, dtype: "npt.DTypeLike" = np.float64, shape: Any = ()) -> SST:
        """An :class:`SST` whose rows are ``shape`` of ``dtype`` (zero at first)."""
        dt, shp = _shape(dtype, shape, "an sst row")
        return SST(self, name, self._build("sst", name, "sst", _nbytes(dt, shp)), dt, shp)

    def barrier(self, name: str) -> Barrier:
        """A :class:`Barrier` of every participant."""
        return Barrier(self, name, self._build("barrier", name, "barrier"))

    def lock(self, name: str) -> TicketLock:
        """A :class:`TicketLock`."""
        return TicketLock(self, name, self._build("ticket_lock", name, "lock"))

    def ring(self, name: str, sender: int, capacity: int = 1 << 16) -> Ring:
        """A :class:`Ring` that rank ``sender`` sends on, of ``capacity``
        bytes (a multiple of 8, 256..4 MiB; a message is at most a quarter)."""
        i = self._index(sender, "sender")
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or \
                not 256 <= capacity <= 1 << 22 or capacity % 8:
            raise InvalidArgument(f"capacity must be a multiple of 8 in 256..{1 << 22}, not {capacity!r}")
        return Ring(self, name, self._build("ringbuffer", name, "ring", i, int(capacity)), int(sender), int(capacity))

    def queue(self, name: str, capacity: int = 1024) -> SharedQueue:
        """A :class:`SharedQueue` of ``capacity`` slots (1..2**20), spread
        over the participants."""
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or not 1 <= capacity <= 1 << 20:
            raise InvalidArgument(f"capacity must be an int in 1..{1 << 20}, not {capacity!r}")
        return SharedQueue(self, name, self._build("shared_queue", name, "queue", int(capacity)), int(capacity))

    def kvstore(self, name: str, slots: int = 1024, locks: int = 16, dtype: "npt.DTypeLike" = np.uint64,
                shape: Any = ()) -> KVStore:
        """A :class:`KVStore` with ``slots`` slots per participant (the keys
        it may insert, 1..65536), ``locks`` ticket locks (1..64) and
        values of ``shape`` of ``dtype`` (1..256 bytes; by default one
        uint64, which get returns as an int)."""
        lib = _lib.ext().lib
        for what, v, hi in (("slots", slots, lib.DSM_CHAN_KV_MAX_SLOTS), ("locks", locks, lib.DSM_CHAN_KV_MAX_LOCKS)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= hi:
                raise InvalidArgument(f"{what} must be an int in 1..{hi}, not {v!r}")
        dt, shp = _shape(dtype, shape, "a kvstore value", int(lib.DSM_CHAN_KV_MAX_VALUE))
        nbytes = _nbytes(dt, shp)
        try:
            h = self._build("kvstore", name, "kv", int(slots), int(locks), nbytes, _value_type(dt, shp),
                            create="create_typed")
        except InvalidArgument as err:
            # equal bytes of another dtype (a float64 and a uint64) are
            # refused as another shape: say which dtypes met
            m = _VALUE_TYPES.search(str(err))
            if m is None or m.group(1) == m.group(2):
                raise
            raise InvalidArgument(f"kvstore '{self.name}/{name}': its values are {_value_type_text(int(m.group(1)))} "
                                  f"here but {_value_type_text(int(m.group(2)))} at rank {m.group(3)}: every "
                                  f"participant builds it with the same dtype and shape ({err.message})",
                                  status=err.status, status_name=err.status_name, c_message=err.c_message,
                                  node=err.node, op="create") from err
        return KVStore(self, name, h, int(slots), int(locks), dt, shp)


class Chan:
    """LOCO's channel objects on a cluster (``c.chan``): groups of Python
    processes and the objects they share (see :mod:`pydsm.chan`)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._groups: Dict[str, Group] = {}
        self._objects: Dict[int, _Object] = {}
        #: closed shared_regions whose views still hold their endpoint
        self._held: Dict[int, SharedRegion] = {}

    def __repr__(self) -> str:
        return f"<pydsm.Chan of the cluster at {self.session.coordinator or '?'}>"

    def group(self, name: str, ranks: Sequence[int], *, timeout: Optional[float] = None) -> Group:
        """The :class:`Group` ``name`` of the Python processes of ``ranks``
        (their ``c.rank``; this process's among them, 2..64 of them, no
        daemon). Every participant calls it with the same name and ranks;
        ``timeout`` bounds each object's build (None: the cluster's join
        timeout)."""
        _check_name(name, "the group name")
        if len(name) > NAME_MAX - 2:
            raise InvalidArgument(f"the group name is longer than {NAME_MAX - 2} bytes")
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise InvalidArgument(f"ranks must be a list of ranks (each process's c.rank), not {ranks!r}")
        rs = list(ranks)
        e = _lib.ext()
        first = int(e.lib.DSM_FIRST_CLIENT_RANK)
        for r in rs:
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= int(r) < e.lib.DSM_MAX_RANKS:
                raise InvalidArgument(f"ranks must be ints (each process's c.rank), not {r!r}")
            if int(r) < first:
                raise InvalidArgument(f"rank {int(r)} is a daemon: the participants are Python processes (ranks from "
                                      f"{first}, each process's c.rank); daemons do not build these objects",
                                      node=int(r))
        sorted_ranks = tuple(sorted(int(r) for r in rs))
        if len(set(sorted_ranks)) != len(sorted_ranks):
            raise InvalidArgument(f"ranks {rs} repeat a rank")
        if not 2 <= len(sorted_ranks) <= MAX_PARTICIPANTS:
            raise InvalidArgument(f"a group has 2..{MAX_PARTICIPANTS} participants, not {len(sorted_ranks)}")
        _ms(timeout, f"group '{name}'")
        with self.session.in_use() as n:
            me = int(e.lib.dsm_node_rank(n))
            if me not in sorted_ranks:
                raise InvalidArgument(f"this process (rank {me}) is not among the ranks {list(sorted_ranks)} of group "
                                      f"'{name}'")
            old = self._groups.get(name)
            if old is not None:
                raise StateError(f"group '{name}' is open in this process already (ranks {list(old.ranks)})",
                                 op="group")
            arr = e.ffi.new("uint32_t[]", list(sorted_ranks))
            e.lib.dsm_clear_last_error()
            _lib.ext().lib.dsm_clear_last_error()
            _raise(e.lib.dsm_chan_group(n, name.encode(), arr, len(sorted_ranks)), f"cannot define group '{name}'",
                   "group")
        g = Group(self, name, sorted_ranks, me, timeout)
        self._groups[name] = g
        return g

    def _close_all(self) -> List[str]:
        """Destroy every object still open, newest first (Cluster.close,
        the session drained, before the node goes). The names of the
        shared_regions whose views still hold their memory: while there
        are any, the node must not be destroyed."""
        viewed: List[str] = []
        for obj in list(self._objects.values())[::-1] + list(self._held.values()):
            try:
                if obj._destroy_at_close():
                    viewed.append(obj.full_name)
            except DsmError:  # pragma: no cover - best effort at close
                pass
        self._objects.clear()
        self._held.clear()
        self._groups.clear()
        return viewed


__all__ = ["Chan", "Group", "AtomicVar", "OwnedVar", "SharedRegion", "SST", "Barrier", "TicketLock", "Ring",
           "SharedQueue", "KVStore"]

