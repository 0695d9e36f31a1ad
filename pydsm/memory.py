"""Global memory: :class:`GlobalBuffer` (a typed, shaped allocation indexed
like a numpy array) and :class:`Memory` (``c.memory``: the numpy-shaped
constructors, and access by raw global address).

Each operation has one home. Access *by index* into an allocation lives on
:class:`GlobalBuffer`; access *by global address* (an address a workload
handed back, a batch that gathers across allocations) lives on
:class:`Memory`. Both reach the C core through the same few private calls
of :class:`Memory` (``_read_at``, ``_write_at``, ``_word_at``, ``_batch``);
the :class:`Memory` methods that also take a GlobalBuffer hand it to the
buffer's own method.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _lib
from .errors import BadAddress, InvalidArgument, OutOfMemory
from .session import Session, node_of
from .units import format_size, parse_size

_U64 = (1 << 64) - 1
_WORD_DTYPES = (np.dtype(np.int64), np.dtype(np.uint64))

#: What the constructors take as a shape: an int or a sequence of ints.
ShapeLike = Union[int, np.integer, Sequence[int]]
Array = npt.NDArray[Any]


def _u64(op: str, v: Any) -> int:
    """An atomic's operand as an unsigned 64-bit int (negative values wrap)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidArgument(f"{op} takes integers, not {v!r}")
    return int(v) & _U64


def _shape(shape: Any, op: str) -> Tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (numpy's spelling: an int or a sequence)."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        dims: Tuple[Any, ...] = (shape,)
    elif isinstance(shape, (tuple, list)):
        dims = tuple(shape)
    else:
        raise InvalidArgument(f"shape must be an int or a tuple of ints, not {shape!r}", op=op)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise InvalidArgument(f"shape must hold non-negative ints, not {tuple(shape)!r}", op=op)
    return tuple(int(d) for d in dims)


class GlobalBuffer:
    """An allocation in global memory on node ``node``, seen as an n-D array
    of ``dtype`` and ``shape`` (``nbytes == size * itemsize``).

    It indexes like a numpy array, and each access moves only the bytes it
    needs: ``buf[i]``, ``buf[a:b]``, ``buf[2, 1:3]`` read the rows they touch,
    ``buf[a:b] = x`` writes them (other keys read the covering rows, assign
    locally and write them back, which is not atomic against other writers).
    ``np.asarray(buf)`` reads it all. Writes convert to the buffer's dtype by
    numpy's rules (``casting="same_kind"`` for arrays). 64-bit atomics address
    the words of an int64/uint64 buffer by index. Use it as a context manager
    (or call :meth:`free`) to free it. ``int(buf)`` is its global address,
    which C workloads take as a param.

    Global memory outlives the process that allocated it, as shared memory
    does: another process may hold its address, so a buffer not freed stays
    allocated on its node after its process closes the cluster or dies.
    """

    def __init__(self, memory: "Memory", address: int, node: int, dtype: npt.DTypeLike,
                 shape: Tuple[int, ...]) -> None:
        self.memory = memory
        self._session = memory.session   # the fast path's one hop to the C call
        self.address = int(address)
        self.node = int(node)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self.shape: Tuple[int, ...] = tuple(int(d) for d in shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        #: bytes of the allocation in global memory: always size * itemsize
        self.nbytes = self.size * self.dtype.itemsize
        # bytes of one row of the first axis (the unit indexing moves)
        self._row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.freed = False
        self._word_dtype: Optional[np.dtype[Any]] = None   # self.dtype once checked as a word type
        # a vector of 8-byte numbers: buf[i] is one word call (Session.word1)
        self._w8 = (_W8.get(self.dtype) if len(self.shape) == 1 else None)
        if self._w8 is not None:
            lib = _lib.ext().lib
            f64 = self._w8 == "f64"
            self._read8 = lib._pydsm_read_f64 if f64 else lib._pydsm_read_u64
            self._write8 = lib._pydsm_write_f64 if f64 else lib._pydsm_write_u64
        self._signed = False                                # ... and whether it is int64

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __int__(self) -> int:
        return self.address

    def __index__(self) -> int:
        return self.address

    def __len__(self) -> int:
        """The first dimension, as for a numpy array."""
        if not self.shape:
            raise TypeError("len() of a 0-d GlobalBuffer")
        return self.shape[0]

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return (f"<GlobalBuffer {self.address:#x} node={self.node} nbytes={self.nbytes} "
                f"dtype={self.dtype} shape={self.shape}{state}>")

    def __enter__(self) -> "GlobalBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.freed and not self.memory.session.closed:
            self.free()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Array:
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    # ------------------------------------------------------------- checks
    def _span(self, offset: int, nbytes: int, op: str) -> int:
        """The global address of ``nbytes`` at byte ``offset``, inside the live buffer."""
        if self.freed:
            raise BadAddress("the buffer was freed", node=self.node, address=self.address, op=op)
        if offset < 0 or offset + nbytes > self.nbytes:
            raise BadAddress(f"access of {nbytes} bytes at offset {offset} is outside the "
                             f"buffer of {self.nbytes} bytes", node=self.node, address=self.address, op=op)
        return self.address + offset

    # ------------------------------------------------------------ indexing
    def _row_window(self, key: Any) -> Tuple[int, int, Tuple[Any, ...]]:
        """The rows [lo, hi) of the first axis that ``key`` touches, and the
        key to apply to the array of those rows."""
        parts = key if isinstance(key, tuple) else (key,)
        n = self.shape[0] if self.shape else 0
        if not self.shape or not parts:
            return 0, n, parts
        k0, rest = parts[0], parts[1:]
        if isinstance(k0, (int, np.integer)) and not isinstance(k0, (bool, np.bool_)):
            i = int(k0)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
            i %= n
            return i, i + 1, (0,) + rest
        if isinstance(k0, slice):
            start, stop, step = k0.indices(n)
            count = len(range(start, stop, step))
            if count == 0:
                return 0, 0, (slice(0, 0),) + rest
            last = start + step * (count - 1)
            lo, hi = min(start, last), max(start, last) + 1
            return lo, hi, (slice(None, None, step),) + rest
        return 0, n, parts   # Ellipsis, arrays, None, masks: the whole first axis

    def _read_rows(self, lo: int, hi: int) -> Array:
        if not self.shape:
            return self.read()
        arr = np.empty((hi - lo,) + self.shape[1:], self.dtype)
        return self.memory._read_at(self._span(lo * self._row_bytes, arr.nbytes, "read"), arr)

    def __getitem__(self, key: Any) -> Any:
        w8, n = self._w8, self.size
        if w8 is not None and type(key) is int and -n <= key < n and not self.freed:
            # the common index of the common buffers: one call that returns the word
            v = self._session.word1(self._read8, self.address + (key % n) * 8)
            if w8 == "f64":
                return np.float64(v)
            return np.uint64(v) if w8 == "u64" else np.int64(v - (1 << 64) if v >> 63 else v)
        if type(key) is int and len(self.shape) == 1 and not self.freed and -self.size <= key < self.size:
            # one element of a vector, the common index: one C call into this
            # thread's scratch element, no window and no buffer export
            one, ptr = _scratch(self.dtype)
            self.memory._transfer("read", self.address + (key % self.size) * self._row_bytes, ptr, one.itemsize)
            return one[0]
        lo, hi, local = self._row_window(key)
        return self._read_rows(lo, hi)[local]

    def __setitem__(self, key: Any, value: Any) -> None:
        w8, n = self._w8, self.size
        if w8 is not None and type(key) is int and -n <= key < n and not self.freed:
            addr = self.address + (key % n) * 8
            tv = type(value)
            if w8 == "f64" and (tv is float or (tv is int and -_F64_INTS < value < _F64_INTS)):
                self._session.word1(self._write8, addr, (float(value),), "write", True)
                return
            if tv is int and (0 <= value <= _U64 if w8 == "u64" else -(1 << 63) <= value < (1 << 63)):
                self._session.word1(self._write8, addr, (value & _U64,), "write", True)
                return
        if (type(key) is int and len(self.shape) == 1 and not self.freed and -self.size <= key < self.size
                and type(value) in (int, float)):
            one, ptr = _scratch(self.dtype)
            try:
                one[0] = value
            except (ValueError, TypeError, OverflowError) as exc:
                raise InvalidArgument(f"cannot write {value!r:.60} into a {self.dtype} buffer: {exc}",
                                      op="write") from None
            self.memory._transfer("write", self.address + (key % self.size) * self._row_bytes, ptr, one.itemsize)
            return
        lo, hi, local = self._row_window(key)
        src = _as_values(value, self.dtype)
        whole_rows = self.shape and len(local) == 1 and (
            (isinstance(local[0], int) and local[0] == 0) or local[0] == slice(None, None, 1))
        if whole_rows:       # nothing of the old rows survives: no need to read them
            rows = np.empty((hi - lo,) + self.shape[1:], self.dtype)
            rows[local] = src
        else:
            rows = self._read_rows(lo, hi)
            rows[local] = src
        if rows.nbytes:
            self.memory._write_at(self._span(lo * self._row_bytes, rows.nbytes, "write"), rows)

    def addr(self, offset: int = 0) -> int:
        """Global address of byte ``offset`` of this buffer (bounds-checked)."""
        if not 0 <= offset <= self.nbytes:
            raise BadAddress(f"offset {offset} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self.address + offset

    def read(self, dtype: Optional[npt.DTypeLike] = None, shape: Optional[ShapeLike] = None, offset: int = 0,
             out: Optional[Array] = None) -> Array:
        """Read into a new numpy array (or ``out``). By default the whole
        buffer with its dtype and shape. ``offset`` is in bytes and must be a
        multiple of the item size; the default shape is the rest of the
        buffer from ``offset``."""
        if dtype is None and shape is None and offset == 0 and out is None and not self.freed:
            # the whole buffer as allocated: one C call into a new array
            return self.memory._read_at(self.address, np.empty(self.shape, self.dtype))
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise InvalidArgument(f"offset must be an int, not {type(offset).__name__}", op="read")
        if not 0 <= offset <= self.nbytes:
            raise BadAddress(f"read at offset {offset} is outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        if out is not None:
            arr = _out_array(out)
        else:
            dt = np.dtype(dtype) if dtype is not None else self.dtype
            if offset % dt.itemsize:
                raise InvalidArgument(f"offset {offset} is not a multiple of the item size "
                                      f"{dt.itemsize} of {dt}", op="read")
            dims: Tuple[int, ...]
            if shape is None:
                dims = self.shape if dtype is None and offset == 0 else ((self.nbytes - offset) // dt.itemsize,)
            else:
                dims = _shape(shape, "read")
            arr = np.empty(dims, dt)
        return self.memory._read_at(self._span(int(offset), arr.nbytes, "read"), arr)

    def write(self, data: Any, offset: int = 0, casting: str = "same_kind") -> None:
        """Write ``data`` at byte ``offset``: bytes as they are; arrays and
        sequences converted to the buffer's dtype (arrays under numpy's
        ``casting`` rule, ``"same_kind"`` by default; a cast it forbids is an
        InvalidArgument)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
        else:
            arr = np.ascontiguousarray(_as_values(data, self.dtype, casting))
        addr = self._span(int(offset), arr.nbytes, "write")
        if arr.nbytes:
            self.memory._write_at(addr, arr)

    # ------------------------------------------------------------- atomics
    def _word(self, index: int, op: str) -> int:
        dt = self.dtype
        if dt is not self._word_dtype:   # compared once per dtype (numpy's == is slow)
            if dt not in _WORD_DTYPES:
                raise InvalidArgument(f"{op} needs an int64 or uint64 buffer, not {self.dtype} "
                                      f"(allocate with dtype=np.uint64)", op=op)
            self._word_dtype = dt
            self._signed = dt.kind == "i"
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise InvalidArgument(f"a word index must be an int, not {type(index).__name__}", op=op)
        if index < 0 or int(index) * 8 + 8 > self.nbytes:
            raise BadAddress(f"word {index} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self._span(int(index) * 8, 8, op)

    def _typed(self, word: int) -> int:
        """A 64-bit word as this buffer's dtype reads it (signed for int64;
        the dtype checked by :meth:`_word` first)."""
        return word - (1 << 64) if word >> 63 and self._signed else word

    def fetch_add(self, value: int = 1, index: int = 0) -> int:
        """Atomically add ``value`` (mod 2**64) to 64-bit word ``index``; returns the old value."""
        if (type(value) is int and type(index) is int and self.dtype is self._word_dtype
                and 0 <= index < self.size and not self.freed):
            # the common call, checked inline: one C call, no generic path
            old = self._session.fetch_add1(self.address + 8 * index, value & _U64)
            return old - (1 << 64) if old >> 63 and self._signed else old   # _typed, inline
        return self._typed(self.memory._word_at("fetch_add", self._word(index, "fetch_add"),
                                                _u64("fetch_add", value)))

    def cas(self, expected: int, desired: int, index: int = 0) -> int:
        """Compare-and-swap on word ``index``; returns the old value (== expected on success)."""
        return self._typed(self.memory._word_at("cas", self._word(index, "cas"),
                                                _u64("cas", expected), _u64("cas", desired)))

    def swap(self, value: int, index: int = 0) -> int:
        """Atomically replace word ``index``; returns the old value."""
        return self._typed(self.memory._word_at("swap", self._word(index, "swap"), _u64("swap", value)))

    def free(self) -> None:
        """Free the allocation (a second free raises BadAddress)."""
        addr = self._span(0, 0, "free")
        self.memory._free_at(addr)
        self.freed = True

    # ------------------------------------------------------------- batches
    def _element_addrs(self, indices: Any, itemsize: int) -> npt.NDArray[np.uint64]:
        self._span(0, 0, "batch")   # freed
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise InvalidArgument(f"indices must be integers, not {idx.dtype}", op="batch")
        idx = idx.astype(np.int64, copy=False).ravel()
        count = self.nbytes // itemsize
        bad = (idx < 0) | (idx >= count)
        if bad.any():
            raise BadAddress(f"index {int(idx[bad][0])} outside the buffer of {count} elements of "
                             f"{itemsize} bytes", node=self.node, address=self.address)
        return (self.address + idx * itemsize).astype(np.uint64)

    def read_many(self, indices: Any) -> Array:
        """The elements at flat ``indices`` (numpy array of ints), in one batch."""
        return self.memory._read_batch(self._element_addrs(indices, self.itemsize), self.dtype)

    def write_many(self, indices: Any, values: Any) -> None:
        """Write ``values`` (converted to the buffer's dtype) to flat ``indices``, in one batch."""
        vals = _as_values(values, self.dtype)
        addrs = self._element_addrs(indices, self.itemsize)
        self.memory._write_batch(addrs, np.ascontiguousarray(np.broadcast_to(vals, addrs.shape)))

    def fetch_add_many(self, indices: Any, values: Any = 1) -> Array:
        """Atomically add ``values`` to the 64-bit words at ``indices``, in one
        batch; returns the old values (signed for an int64 buffer)."""
        self._word(0, "fetch_add_many")   # the dtype check
        olds = self.memory._fetch_add_batch(self._element_addrs(indices, 8), values)
        return olds.view(np.int64) if self.dtype == np.int64 else olds


def _as_values(data: Any, dtype: np.dtype[Any], casting: Any = "same_kind") -> Array:
    """``data`` as an array of ``dtype``: numpy arrays under ``casting``,
    Python scalars and sequences by numpy's own conversion (which refuses a
    value the dtype cannot hold)."""
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        arr = np.asarray(data)
        if arr.dtype.hasobject:
            raise InvalidArgument("cannot write an array of Python objects")
        if arr.dtype != dtype:
            if not np.can_cast(arr.dtype, dtype, casting=casting):
                raise InvalidArgument(f"cannot write {arr.dtype} into a {dtype} buffer "
                                      f"under casting={casting!r}", op="write")
            arr = arr.astype(dtype)
        return arr
    try:
        return np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgument(f"cannot write {data!r:.60} into a {dtype} buffer: {exc}", op="write") from None


_tls = threading.local()
#: buffer dtypes whose element is one 8-byte word call (GlobalBuffer._w8)
_W8: Dict[np.dtype[Any], str] = {np.dtype(np.uint64): "u64", np.dtype(np.int64): "i64",
                                 np.dtype(np.float64): "f64"}
#: ints a float64 element takes by float() without overflow
_F64_INTS = 1 << 1000


def _scratch(dtype: np.dtype[Any]) -> Tuple[Array, Any]:
    """This thread's one-element array of ``dtype`` and its C pointer, made
    once: exporting a numpy buffer to C costs more than a remote read."""
    cache: Optional[Dict[np.dtype[Any], Tuple[Array, Any]]] = getattr(_tls, "scratch", None)
    if cache is None:
        cache = _tls.scratch = {}
    hit = cache.get(dtype)
    if hit is None:
        one = np.zeros(1, dtype)
        hit = cache[dtype] = (one, _lib.ext().ffi.from_buffer(one, require_writable=True))
    return hit


def _out_array(out: Any) -> Array:
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise InvalidArgument("out must be a writable C-contiguous numpy array")
    return out


Address = Union[int, GlobalBuffer]


class Memory:
    """Global memory of a cluster (``c.memory``): allocation with numpy's
    constructors, and access by raw global address.

    ``empty``/``zeros``/``asarray`` make a :class:`GlobalBuffer` as their
    numpy namesakes make an array; :meth:`alloc` is the older spelling of
    ``empty`` (a byte count) and ``asarray`` (data). Reads, writes and
    atomics here take global addresses (ints, e.g. ``buf.addr(16)`` or an
    address a workload returned); given a GlobalBuffer they call its method.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    def __repr__(self) -> str:
        return f"<pydsm.Memory of the cluster at {self.session.coordinator or '?'}>"

    # -------------------------------------------------------- constructors
    def _new(self, shape: Tuple[int, ...], dtype: npt.DTypeLike, node: int, op: str) -> GlobalBuffer:
        """An uninitialised buffer of ``shape`` and ``dtype`` on ``node``."""
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise InvalidArgument("an array of Python objects cannot live in global memory", op=op)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes <= 0:
            raise InvalidArgument(f"cannot allocate {nbytes} bytes (shape {shape} of {dt})", op=op)
        node = self.session.check_node(node)
        cap = self.session.partition_size(node)
        if cap and nbytes > cap:
            raise OutOfMemory(f"cannot allocate {format_size(nbytes)}: node {node} serves only "
                              f"{format_size(cap)}", node=node, op=op)
        e = _lib.ext()
        out = e.ffi.new("dsm_gaddr_t *")
        with self.session.in_use() as n:
            st = e.lib.dsm_alloc(n, node, nbytes, out)
        _lib.check(st, f"cannot allocate {nbytes} bytes", node=node, op=op)
        return GlobalBuffer(self, int(out[0]), node, dt, shape)

    def empty(self, shape: ShapeLike, dtype: npt.DTypeLike = np.float64, *, node: int = 0) -> GlobalBuffer:
        """A new buffer of ``shape`` and ``dtype`` on daemon ``node``, its
        contents undefined, as ``np.empty``: after a free the heap hands the
        same bytes out again, so they may hold an earlier allocation's data.
        Use :meth:`zeros` where a workload needs zeroed memory."""
        return self._new(_shape(shape, "empty"), dtype, node, "empty")

    def zeros(self, shape: ShapeLike, dtype: npt.DTypeLike = np.float64, *, node: int = 0) -> GlobalBuffer:
        """A new buffer of ``shape`` and ``dtype`` on daemon ``node``, every
        byte zero (written, whatever the memory held before)."""
        buf = self._new(_shape(shape, "zeros"), dtype, node, "zeros")
        try:
            self._write_at(buf.address, np.zeros(buf.nbytes, np.uint8))
        except BaseException:
            buf.free()
            raise
        return buf

    def asarray(self, data: Any, dtype: Optional[npt.DTypeLike] = None, *, node: int = 0) -> GlobalBuffer:
        """A new buffer on daemon ``node`` holding ``data`` (an array, or
        anything ``np.asarray`` takes, or bytes), with its dtype and shape."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
            if dtype is not None:
                arr = arr.astype(dtype)
        else:
            try:
                arr = np.asarray(data) if dtype is None else np.asarray(data, dtype=dtype)
            except (ValueError, TypeError, OverflowError) as exc:
                raise InvalidArgument(f"cannot allocate from {data!r:.60}: {exc}", op="asarray") from None
        if not arr.flags.c_contiguous:   # (ascontiguousarray would make a 0-d array 1-d)
            arr = np.ascontiguousarray(arr)
        buf = self._new(arr.shape, arr.dtype, node, "asarray")
        try:
            self._write_at(buf.address, arr)
        except BaseException:
            buf.free()
            raise
        return buf

    def alloc(self, size: Any, node: int = 0, *, dtype: Optional[npt.DTypeLike] = None,
              shape: Optional[ShapeLike] = None) -> GlobalBuffer:
        """Allocate global memory on daemon ``node``: with data, as
        :meth:`asarray`; with a size, as :meth:`empty` (contents undefined:
        after a free they may be an earlier allocation's bytes).

        ``size`` is data (a numpy array, bytes, a list or tuple as
        ``np.asarray`` takes it) or a byte count (or text like ``"1MiB"``),
        seen as ``dtype`` (uint8 by default) in ``shape`` (by default as
        many items as fit; a byte count that is not a whole number of items,
        or a shape of another size, is refused).
        """
        if isinstance(size, (np.ndarray, bytes, bytearray, memoryview, list, tuple)):
            if shape is not None:
                raise InvalidArgument("alloc with data takes its shape from the data", op="alloc")
            return self.asarray(size, dtype, node=node)
        if isinstance(size, bool) or not isinstance(size, (str, int, np.integer)):
            raise InvalidArgument(f"alloc takes a size in bytes or a numpy array, not {type(size).__name__}")
        try:
            nbytes = parse_size(int(size) if isinstance(size, np.integer) else size)
        except ValueError as exc:
            raise InvalidArgument(str(exc), op="alloc") from None
        if nbytes <= 0:
            raise InvalidArgument(f"cannot allocate {nbytes} bytes", op="alloc")
        dt = np.dtype(dtype) if dtype is not None else np.dtype(np.uint8)
        if shape is None:
            if nbytes % dt.itemsize:
                raise InvalidArgument(f"{nbytes} bytes is not a whole number of {dt} items "
                                      f"({dt.itemsize} bytes each)", op="alloc")
            dims: Tuple[int, ...] = (nbytes // dt.itemsize,)
        else:
            dims = _shape(shape, "alloc")
            need = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
            if need != nbytes:
                raise InvalidArgument(f"shape {dims} of {dt} is {need} bytes, not the {nbytes} asked for",
                                      op="alloc")
        return self._new(dims, dt, node, "alloc")

    # ----------------------------------------------------- the C primitives
    def _read_at(self, addr: int, arr: Array) -> Array:
        """``dsm_read`` of ``arr.nbytes`` bytes at a checked address into ``arr``."""
        if arr.nbytes:
            self._transfer("read", addr, _lib.ext().ffi.from_buffer(arr, require_writable=True), arr.nbytes)
        return arr

    def _transfer(self, op: str, addr: int, ptr: Any, nbytes: int) -> None:
        """``dsm_read`` (op "read") or ``dsm_write`` (op "write") of ``nbytes``
        between a checked address and a C pointer."""
        lib = _lib.ext().lib
        fn = lib.dsm_read if op == "read" else lib.dsm_write
        session = self.session
        n = session.begin()
        try:
            st = fn(n, addr, ptr, nbytes)
        finally:
            session.end()
        if st < 0:
            _lib.check(st, f"cannot {op} {nbytes} bytes", node=node_of(addr), address=addr, op=op)

    def _write_at(self, addr: int, arr: Array) -> None:
        """``dsm_write`` of a C-contiguous array at a checked address."""
        self._transfer("write", addr, _lib.ext().ffi.from_buffer(arr), arr.nbytes)

    def _word_at(self, op: str, addr: int, *vals: int) -> int:
        """``dsm_<op>`` on a checked, aligned address: one C call in the bracket."""
        e = _lib.ext()
        old = e.ffi.new("uint64_t *")
        fn = getattr(e.lib, "dsm_" + op)
        session = self.session
        n = session.begin()
        try:
            st = fn(n, addr, *vals, old)
        finally:
            session.end()
        if st < 0:
            _lib.check(st, "", node=node_of(addr), address=addr, op=op)
        return int(old[0])

    def _free_at(self, addr: int) -> None:
        e = _lib.ext()
        with self.session.in_use() as n:
            st = e.lib.dsm_free(n, addr)
        _lib.check(st, "cannot free", node=node_of(addr), address=addr, op="free")

    def _batch(self, op: str, addrs: npt.NDArray[np.uint64], call: Any) -> None:
        """Run a C batch call and raise the first element's error, if any."""
        e = _lib.ext()
        statuses = np.zeros(len(addrs), np.int32)
        with self.session.in_use() as n:
            st = call(e, n, e.ffi.from_buffer("dsm_gaddr_t[]", addrs),
                      e.ffi.from_buffer("dsm_status_t[]", statuses, require_writable=True))
        if st < 0:
            bad = np.flatnonzero(statuses)
            i = int(bad[0]) if len(bad) else 0
            addr = int(addrs[i]) if len(addrs) else 0
            _lib.check(st, f"element {i} of {len(addrs)} failed ({len(bad)} failed in all)",
                       node=node_of(addr) if addr else None, address=addr or None, op=op)

    def _read_batch(self, a: npt.NDArray[np.uint64], dtype: npt.DTypeLike) -> Array:
        out = np.empty(len(a), np.dtype(dtype))
        if len(a):
            self._batch("read_many", a, lambda e, n, pa, ps: e.lib.dsm_read_batch(
                n, pa, e.ffi.from_buffer(out, require_writable=True), out.itemsize, len(a), ps))
        return out

    def _write_batch(self, a: npt.NDArray[np.uint64], vals: Array) -> None:
        if len(a):
            self._batch("write_many", a, lambda e, n, pa, ps: e.lib.dsm_write_batch(
                n, pa, e.ffi.from_buffer(vals), vals.itemsize, len(a), ps))

    def _fetch_add_batch(self, a: npt.NDArray[np.uint64], values: Any) -> npt.NDArray[np.uint64]:
        v = np.asarray(values)
        if v.dtype.kind not in "iu":
            raise InvalidArgument(f"fetch_add_many adds integers, not {v.dtype}", op="fetch_add_many")
        vals = np.ascontiguousarray(np.broadcast_to(v.astype(np.int64).view(np.uint64) if v.dtype.kind == "i"
                                                    else v.astype(np.uint64), a.shape))
        olds = np.zeros(len(a), np.uint64)
        if len(a):
            self._batch("fetch_add_many", a, lambda e, n, pa, ps: e.lib.dsm_fetch_add_batch(
                n, pa, e.ffi.from_buffer("uint64_t[]", vals),
                e.ffi.from_buffer("uint64_t[]", olds, require_writable=True), len(a), ps))
        return olds

    # ------------------------------------------------------ raw addresses
    def _own(self, buf: GlobalBuffer) -> GlobalBuffer:
        """``buf``, refused when it belongs to another cluster."""
        if buf.memory.session is not self.session:
            raise BadAddress(f"{buf!r} belongs to another cluster "
                             f"({buf.memory.session.coordinator}), not this one ({self.session.coordinator})",
                             node=buf.node, address=buf.address)
        return buf

    @staticmethod
    def _addr(where: Any, offset: int = 0) -> int:
        """A raw global address (+offset), checked to be one."""
        if isinstance(where, bool) or not isinstance(where, (int, np.integer)):
            raise InvalidArgument(f"an address must be a GlobalBuffer or an int, not {type(where).__name__}")
        addr = int(where) + offset
        if not 0 < addr <= _U64:
            raise BadAddress(f"{addr:#x} is not a global address", address=addr)
        return addr

    def free(self, where: Address) -> None:
        """Free an allocation by its address (a GlobalBuffer: ``buf.free()``)."""
        if isinstance(where, GlobalBuffer):
            return self._own(where).free()
        self._free_at(self._addr(where))

    def read(self, where: Address, nbytes: Optional[int] = None, *, dtype: Optional[npt.DTypeLike] = None,
             shape: Optional[ShapeLike] = None, offset: int = 0, out: Optional[Array] = None) -> Array:
        """Read global memory at an address into a numpy array: into ``out``
        (a C-contiguous writable array), or as ``shape`` and ``dtype``, or
        ``nbytes`` bytes as ``dtype`` (uint8 by default). A GlobalBuffer
        reads as ``buf.read(dtype, shape, offset, out)``."""
        if isinstance(where, GlobalBuffer):
            if shape is None and nbytes is not None:
                dtype = np.uint8 if dtype is None else dtype
                shape = (nbytes // np.dtype(dtype).itemsize,)
            return self._own(where).read(dtype, shape, offset, out)
        if out is not None:
            arr = _out_array(out)
        else:
            dt = np.dtype(dtype if dtype is not None else np.uint8)
            if shape is None:
                if nbytes is None:
                    raise InvalidArgument("read of a raw address needs nbytes, shape or out")
                if nbytes < 0:
                    raise InvalidArgument(f"cannot read {nbytes} bytes", op="read")
                dims: Tuple[int, ...] = (nbytes // dt.itemsize,)
            else:
                dims = _shape(shape, "read")
            arr = np.empty(dims, dtype=dt)
        return self._read_at(self._addr(where, offset), arr)

    def write(self, where: Address, data: Any, *, offset: int = 0, casting: str = "same_kind",
              dtype: Optional[npt.DTypeLike] = None) -> None:
        """Write to global memory at an address: bytes as they are, or a
        numpy array's bytes (any dtype/shape; copied C-contiguous). A raw
        address has no dtype, so the write states it: ``dtype=`` (the data,
        e.g. a list, converted to it under ``casting``) or data that is a
        numpy array or scalar; a list or Python number without ``dtype=`` is
        refused, as its bits would be whatever numpy guessed (int64 values
        into float64 memory). A GlobalBuffer converts the data to its dtype
        (``buf.write(data, offset, casting)``)."""
        if isinstance(where, GlobalBuffer):
            if dtype is not None and np.dtype(dtype) != where.dtype:
                raise InvalidArgument(f"dtype={np.dtype(dtype)} for a {where.dtype} buffer", op="write")
            return self._own(where).write(data, offset, casting)
        if dtype is not None:
            # a list as the array numpy makes of it, so that casting decides (1.5 into int64 is refused)
            given = data if isinstance(data, (np.ndarray, np.generic)) else np.asarray(data)
            arr = np.ascontiguousarray(_as_values(given, np.dtype(dtype), casting))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
        elif isinstance(data, (np.ndarray, np.generic)):
            arr = np.ascontiguousarray(data)
            if arr.dtype.hasobject:
                raise InvalidArgument("cannot write an array of Python objects")
        else:
            raise InvalidArgument(f"a write to a raw address needs the memory's dtype: pass dtype=... or "
                                  f"a numpy array, not a {type(data).__name__}", op="write")
        addr = self._addr(where, offset)
        if arr.nbytes:
            self._write_at(addr, arr)

    def _atomic(self, op: str, where: Address, *values: int) -> int:
        addr = self._addr(where)
        if addr % 8:
            raise InvalidArgument(f"atomics need an 8-byte aligned address, not {addr:#x}",
                                  address=addr, op=op)
        return self._word_at(op, addr, *(_u64(op, v) for v in values))

    def fetch_add(self, where: Address, value: int = 1) -> int:
        """Atomic 64-bit fetch-and-add at an address (mod 2**64; negative
        values subtract). Returns the old value. A GlobalBuffer: word 0."""
        if isinstance(where, GlobalBuffer):
            return self._own(where).fetch_add(value)
        return self._atomic("fetch_add", where, value)

    def cas(self, where: Address, expected: int, desired: int) -> int:
        """Atomic 64-bit compare-and-swap at an address. Returns the old value."""
        if isinstance(where, GlobalBuffer):
            return self._own(where).cas(expected, desired)
        return self._atomic("cas", where, expected, desired)

    def swap(self, where: Address, value: int) -> int:
        """Atomic 64-bit swap at an address. Returns the old value."""
        if isinstance(where, GlobalBuffer):
            return self._own(where).swap(value)
        return self._atomic("swap", where, value)

    @staticmethod
    def _addrs(addrs: Any) -> npt.NDArray[np.uint64]:
        a = np.ascontiguousarray(addrs)
        if a.dtype.kind not in "iu":
            raise InvalidArgument(f"addresses must be integers, not {a.dtype}", op="batch")
        if a.dtype.kind == "i" and (a < 0).any():
            raise BadAddress("a negative address in the batch", op="batch")
        return np.ascontiguousarray(a.ravel(), dtype=np.uint64)

    def read_many(self, addrs: Any, dtype: npt.DTypeLike = np.uint64) -> Array:
        """One element of ``dtype`` from each global address in ``addrs`` (a
        numpy array of ints, which may point into different allocations),
        issued as one batch: about one round trip per window of operations,
        not one per element."""
        return self._read_batch(self._addrs(addrs), dtype)

    def write_many(self, addrs: Any, values: Any, dtype: Optional[npt.DTypeLike] = None) -> None:
        """Write element i of ``values`` to ``addrs[i]``, as one batch;
        visible at the targets on return.

        A raw address has no dtype, so the write states it: ``dtype=`` (the
        values are converted to it under numpy's ``same_kind`` rule, so a
        float into int memory is refused), or ``values`` as a numpy array of
        the memory's dtype. Values without a dtype of their own (a list, a
        scalar) and no ``dtype=`` are refused: their bits would be whatever
        numpy guessed."""
        a = self._addrs(addrs)
        if dtype is not None:
            vals = _as_values(values, np.dtype(dtype)).ravel()
        elif isinstance(values, np.ndarray):
            vals = np.ascontiguousarray(values).ravel()
        else:
            raise InvalidArgument("write_many to raw addresses needs the memory's dtype: pass "
                                  "dtype=... or a numpy array of that dtype", op="write_many")
        if vals.dtype.hasobject:
            raise InvalidArgument("cannot write Python objects", op="write_many")
        if len(vals) != len(a):
            raise InvalidArgument(f"write_many needs one value per address ({len(a)}), not {len(vals)}",
                                  op="write_many")
        self._write_batch(a, np.ascontiguousarray(vals))

    def fetch_add_many(self, addrs: Any, values: Any = 1) -> npt.NDArray[np.uint64]:
        """Atomic 64-bit fetch-and-add of ``values`` (a scalar or one per
        address) at each address, as one batch; returns the old values (uint64)."""
        return self._fetch_add_batch(self._addrs(addrs), values)
