"""The memory API: global buffers, allocation, reads, writes and 64-bit
atomics by global address (the memory side of :class:`pydsm.Cluster`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

from . import _lib
from .errors import BadAddress, InvalidArgument, OutOfMemory
from .units import format_size, parse_size

if TYPE_CHECKING:
    from .cluster import Cluster

_U64 = (1 << 64) - 1
_WORD_DTYPES = (np.dtype(np.int64), np.dtype(np.uint64))


def _u64(op: str, v: Any) -> int:
    """An atomic's operand as an unsigned 64-bit int (negative values wrap)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidArgument(f"{op} takes integers, not {v!r}")
    return int(v) & _U64


class GlobalBuffer:
    """An allocation in global memory: ``nbytes`` bytes on node ``node``,
    seen as an n-D array of ``dtype`` and ``shape``.

    It indexes like a numpy array, and each access moves only the bytes it
    needs: ``buf[i]``, ``buf[a:b]``, ``buf[2, 1:3]`` read the rows they touch,
    ``buf[a:b] = x`` writes them (other keys read the covering rows, assign
    locally and write them back, which is not atomic against other writers).
    ``np.asarray(buf)`` reads it all. Writes convert to the buffer's dtype by
    numpy's rules (``casting="same_kind"`` for arrays). 64-bit atomics address
    the words of an int64/uint64 buffer by index. Use it as a context manager
    (or call :meth:`free`) to free it. ``int(buf)`` is its global address,
    which C workloads take as a param.
    """

    def __init__(self, cluster: "Cluster", address: int, nbytes: int, node: int,
                 dtype: Optional[np.dtype] = None, shape: Optional[Tuple[int, ...]] = None) -> None:
        self.cluster = cluster
        self.address = int(address)
        #: bytes allocated in global memory (may exceed size * itemsize)
        self.nbytes = int(nbytes)
        self.node = int(node)
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.uint8)
        self.shape = tuple(int(d) for d in shape) if shape is not None else (self.nbytes // self.dtype.itemsize,)
        self.freed = False
        self._word_dtype: Optional[np.dtype] = None   # self.dtype once checked as a word type
        self._signed = False                          # ... and whether it is int64

    @property
    def size(self) -> int:
        """Number of elements (the product of ``shape``)."""
        return int(np.prod(self.shape, dtype=np.int64))

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
        if not self.freed and not self.cluster.closed:
            self.free()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype, copy=False)

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

    def _row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.itemsize

    def _read_rows(self, lo: int, hi: int) -> np.ndarray:
        if not self.shape:
            return self.read()
        shape = (hi - lo,) + self.shape[1:]
        return self.cluster.read(self, dtype=self.dtype, shape=shape, offset=lo * self._row_bytes())

    def __getitem__(self, key: Any) -> Any:
        lo, hi, local = self._row_window(key)
        return self._read_rows(lo, hi)[local]

    def __setitem__(self, key: Any, value: Any) -> None:
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
            self.cluster.write(self, rows, offset=lo * self._row_bytes() if self.shape else 0)

    def addr(self, offset: int = 0) -> int:
        """Global address of byte ``offset`` of this buffer (bounds-checked)."""
        if not 0 <= offset <= self.nbytes:
            raise BadAddress(f"offset {offset} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self.address + offset

    def read(self, dtype: Any = None, shape: Any = None, offset: int = 0,
             out: Optional[np.ndarray] = None) -> np.ndarray:
        """Read into a new numpy array (or ``out``). By default the whole
        buffer with the dtype and shape it was allocated with. ``offset`` is
        in bytes and must be a multiple of the item size."""
        if dtype is None and shape is None and offset == 0 and out is None and not self.freed:
            # the whole buffer as allocated: one C call into a new array
            return self.cluster._read_into(self.address, np.empty(self.shape, self.dtype))
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise InvalidArgument(f"offset must be an int, not {type(offset).__name__}", op="read")
        if not 0 <= offset <= self.nbytes:
            raise BadAddress(f"read at offset {offset} is outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        if out is not None:
            return self.cluster.read(self, out=out, offset=offset)
        dt = np.dtype(dtype) if dtype is not None else self.dtype
        if offset % dt.itemsize:
            raise InvalidArgument(f"offset {offset} is not a multiple of the item size "
                                  f"{dt.itemsize} of {dt}", op="read")
        if shape is None:
            if dtype is None and offset == 0:
                shape = self.shape
            else:
                shape = ((self.nbytes - offset) // dt.itemsize,)
        return self.cluster.read(self, dtype=dt, shape=shape, offset=offset)

    def write(self, data: Any, offset: int = 0, casting: str = "same_kind") -> None:
        """Write ``data`` at byte ``offset``: bytes as they are; arrays and
        sequences converted to the buffer's dtype (arrays under numpy's
        ``casting`` rule, ``"same_kind"`` by default; a cast it forbids is an
        InvalidArgument)."""
        self.cluster.write(self, data, offset=offset, casting=casting)

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
        off = int(index) * 8
        if index < 0 or off + 8 > self.nbytes:
            raise BadAddress(f"word {index} outside the buffer of {self.nbytes} bytes",
                             node=self.node, address=self.address)
        return self.address + off

    def _typed(self, word: int) -> int:
        """A 64-bit word as this buffer's dtype reads it (signed for int64;
        the dtype checked by :meth:`_word` first)."""
        return word - (1 << 64) if word >> 63 and self._signed else word

    def fetch_add(self, value: int = 1, index: int = 0) -> int:
        """Atomically add ``value`` (mod 2**64) to 64-bit word ``index``; returns the old value."""
        if (type(value) is int and type(index) is int and self.dtype is self._word_dtype
                and 0 <= index < self.nbytes >> 3 and not self.freed):
            # the common call, checked inline: one C call, no generic path
            old = self.cluster._fetch_add1(self.address + 8 * index, value & _U64)
            return old - (1 << 64) if old >> 63 and self._signed else old   # _typed, inline
        return self._typed(self._word_op("fetch_add", index, value))

    def cas(self, expected: int, desired: int, index: int = 0) -> int:
        """Compare-and-swap on word ``index``; returns the old value (== expected on success)."""
        return self._typed(self._word_op("cas", index, expected, desired))

    def swap(self, value: int, index: int = 0) -> int:
        """Atomically replace word ``index``; returns the old value."""
        return self._typed(self._word_op("swap", index, value))

    def _word_op(self, op: str, index: int, *values: Any) -> int:
        """One atomic on word ``index``: the checks, then one C call."""
        addr = self._word(index, op)
        if self.freed:
            raise BadAddress("the buffer was freed", node=self.node, address=self.address)
        return self.cluster._word_call(op, addr, *(_u64(op, v) for v in values))

    def free(self) -> None:
        """Free the allocation (a second free raises BadAddress)."""
        self.cluster.free(self)

    # ------------------------------------------------------------- batches
    def _element_addrs(self, indices: Any, itemsize: int) -> np.ndarray:
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

    def read_many(self, indices: Any) -> np.ndarray:
        """The elements at flat ``indices`` (numpy array of ints), in one batch."""
        return self.cluster.read_many(self._element_addrs(indices, self.itemsize), self.dtype, _checked=self)

    def write_many(self, indices: Any, values: Any) -> None:
        """Write ``values`` (converted to the buffer's dtype) to flat ``indices``, in one batch."""
        vals = _as_values(values, self.dtype)
        addrs = self._element_addrs(indices, self.itemsize)
        self.cluster.write_many(addrs, np.broadcast_to(vals, addrs.shape), _checked=self)

    def fetch_add_many(self, indices: Any, values: Any = 1) -> np.ndarray:
        """Atomically add ``values`` to the 64-bit words at ``indices``, in one
        batch; returns the old values (signed for an int64 buffer)."""
        self._word(0, "fetch_add_many")   # the dtype check
        olds = self.cluster.fetch_add_many(self._element_addrs(indices, 8), values, _checked=self)
        return olds.view(np.int64) if self.dtype == np.int64 else olds


def _as_values(data: Any, dtype: np.dtype, casting: str = "same_kind") -> np.ndarray:
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


Address = Union[int, GlobalBuffer]


class MemoryAPI:
    """Allocation and access of global memory (a mixin of :class:`pydsm.Cluster`,
    which provides ``_node_in_use``, ``_begin_call``/``_end_call``, ``_calls``, ``_check_node``,
    ``_fetch_add_c`` and ``partition_size``)."""

    coordinator: str
    _fetch_add_c: Any

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
        """The node (rank) part of a global address (heap.h's dsm_gaddr_node)."""
        return int(_lib.ext().lib.dsm_gaddr_node(addr))

    def alloc(self, size: Union[int, str, np.ndarray, bytes, list, tuple], node: int = 0, *,
              dtype: Any = None, shape: Any = None) -> GlobalBuffer:
        """Allocate global memory on daemon ``node``.

        ``size`` is a byte count (or text like ``"1MiB"``), or data: a numpy
        array, bytes, or a list/tuple (as ``np.asarray`` takes it); the buffer
        then gets the data's dtype and shape and its contents.
        ``dtype``/``shape`` set how :meth:`GlobalBuffer.read` sees the bytes.
        """
        data = None
        if isinstance(size, (bytes, bytearray, memoryview)):
            size = np.frombuffer(bytes(size), dtype=np.uint8).copy()
        elif isinstance(size, (list, tuple)):
            try:
                size = np.asarray(size) if dtype is None else np.asarray(size, dtype=dtype)
            except (ValueError, TypeError, OverflowError) as exc:
                raise InvalidArgument(f"cannot allocate from {size!r:.60}: {exc}", op="alloc") from None
            if size.dtype.hasobject:
                raise InvalidArgument("cannot allocate an array of Python objects", op="alloc")
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
        return self._read_into(addr, arr)

    def _read_into(self, addr: int, arr: np.ndarray) -> np.ndarray:
        """``dsm_read`` of ``arr.nbytes`` bytes at a checked address into ``arr``."""
        if arr.nbytes == 0:
            return arr
        e = _lib.ext()
        dst = e.ffi.from_buffer(arr, require_writable=True)
        n = self._begin_call()
        try:
            st = e.lib.dsm_read(n, addr, dst, arr.nbytes)
        finally:
            self._end_call()
        if st < 0:
            _lib.check(st, f"cannot read {arr.nbytes} bytes", node=self._node_of(addr), address=addr, op="read")
        return arr

    def write(self, where: Address, data: Any, *, offset: int = 0, casting: str = "same_kind") -> None:
        """Write to global memory: bytes as they are; to a GlobalBuffer, data
        converted to its dtype (see :meth:`GlobalBuffer.write`); to a raw
        address, a numpy array's bytes (any dtype/shape; copied C-contiguous)
        or anything ``np.asarray`` accepts."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(data), dtype=np.uint8)
        elif isinstance(where, GlobalBuffer):
            arr = np.ascontiguousarray(_as_values(data, where.dtype, casting))
        else:
            arr = np.ascontiguousarray(data)
            if arr.dtype.hasobject:
                raise InvalidArgument("cannot write an array of Python objects")
        addr, _ = self._resolve(where, offset, arr.nbytes)
        if arr.nbytes == 0:
            return
        e = _lib.ext()
        src = e.ffi.from_buffer(arr)
        n = self._begin_call()
        try:
            st = e.lib.dsm_write(n, addr, src, arr.nbytes)
        finally:
            self._end_call()
        if st < 0:
            _lib.check(st, f"cannot write {arr.nbytes} bytes", node=self._node_of(addr), address=addr,
                       op="write")

    def _atomic(self, op: str, where: Address, *values: int) -> int:
        addr, _ = self._resolve(where, 0, 8)
        if addr % 8:
            raise InvalidArgument(f"atomics need an 8-byte aligned address, not {addr:#x}",
                                  address=addr, op=op)
        return self._word_call(op, addr, *(_u64(op, v) for v in values))

    def _fetch_add1(self, addr: int, val: int) -> int:
        """``dsm_fetch_add`` on a checked, aligned address, the driver's
        single-word fast path: one C call that returns the old value, between
        the in-use bracket, with no out-parameter to allocate."""
        calls = self._calls
        calls.append(None)
        try:
            node = self._node
            if self.closed or node is None:
                self._ensure_open()   # raises ClusterClosed
            old = self._fetch_add_c(node, addr, val)
        finally:
            calls.pop()
        if self.closed and not calls:
            self._end_call_notify()
        if old == _U64:
            st = _lib.ext().lib._pydsm_fetch_add_status()
            if st < 0:
                _lib.check(st, "", node=self._node_of(addr), address=addr, op="fetch_add")
        return old

    def _word_call(self, op: str, addr: int, *vals: int) -> int:
        """``dsm_<op>`` on a checked, aligned address: one C call between the
        in-use bracket (no context manager, no error text unless it failed)."""
        e = _lib.ext()
        old = e.ffi.new("uint64_t *")
        fn = getattr(e.lib, "dsm_" + op)
        n = self._begin_call()
        try:
            st = fn(n, addr, *vals, old)
        finally:
            self._end_call()
        if st < 0:
            _lib.check(st, "", node=self._node_of(addr), address=addr, op=op)
        return int(old[0])

    # ------------------------------------------------------------- batches
    def _batch_addrs(self, addrs: Any, checked: Optional[GlobalBuffer]) -> np.ndarray:
        if checked is not None:
            self._resolve(checked)       # owner, freed, closed
        a = np.ascontiguousarray(addrs)
        if a.dtype.kind not in "iu":
            raise InvalidArgument(f"addresses must be integers, not {a.dtype}", op="batch")
        if a.dtype.kind == "i" and (a < 0).any():
            raise BadAddress("a negative address in the batch", op="batch")
        return np.ascontiguousarray(a.ravel(), dtype=np.uint64)

    def _batch(self, op: str, addrs: np.ndarray, call: Any) -> None:
        """Run a C batch call and raise the first element's error, if any."""
        e = _lib.ext()
        statuses = np.zeros(len(addrs), np.int32)
        with self._node_in_use() as n:
            st = call(e, n, e.ffi.from_buffer("dsm_gaddr_t[]", addrs),
                      e.ffi.from_buffer("dsm_status_t[]", statuses, require_writable=True))
        if st < 0:
            bad = np.flatnonzero(statuses)
            i = int(bad[0]) if len(bad) else 0
            addr = int(addrs[i]) if len(addrs) else 0
            _lib.check(st, f"element {i} of {len(addrs)} failed ({len(bad)} failed in all)",
                       node=self._node_of(addr) if addr else None, address=addr or None, op=op)

    def read_many(self, addrs: Any, dtype: Any = np.uint64, *, _checked: Optional[GlobalBuffer] = None) -> np.ndarray:
        """One element of ``dtype`` from each global address in ``addrs`` (a
        numpy array of ints), issued as one batch: about one round trip per
        window of operations, not one per element."""
        a = self._batch_addrs(addrs, _checked)
        out = np.empty(len(a), np.dtype(dtype))
        if len(a):
            self._batch("read_many", a, lambda e, n, pa, ps: e.lib.dsm_read_batch(
                n, pa, e.ffi.from_buffer(out, require_writable=True), out.itemsize, len(a), ps))
        return out

    def write_many(self, addrs: Any, values: Any, *, _checked: Optional[GlobalBuffer] = None) -> None:
        """Write element i of ``values`` (a numpy array, one per address) to
        ``addrs[i]``, as one batch; visible at the targets on return."""
        a = self._batch_addrs(addrs, _checked)
        vals = np.ascontiguousarray(values).ravel()
        if vals.dtype.hasobject or len(vals) != len(a):
            raise InvalidArgument(f"write_many needs one value per address ({len(a)}), not {len(vals)}"
                                  if not vals.dtype.hasobject else "cannot write Python objects", op="write_many")
        if len(a):
            self._batch("write_many", a, lambda e, n, pa, ps: e.lib.dsm_write_batch(
                n, pa, e.ffi.from_buffer(vals), vals.itemsize, len(a), ps))

    def fetch_add_many(self, addrs: Any, values: Any = 1, *, _checked: Optional[GlobalBuffer] = None) -> np.ndarray:
        """Atomic 64-bit fetch-and-add of ``values`` (a scalar or one per
        address) at each address, as one batch; returns the old values (uint64)."""
        a = self._batch_addrs(addrs, _checked)
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

    def fetch_add(self, where: Address, value: int = 1) -> int:
        """Atomic 64-bit fetch-and-add (mod 2**64; negative values subtract). Returns the old value."""
        return self._atomic("fetch_add", where, value)

    def cas(self, where: Address, expected: int, desired: int) -> int:
        """Atomic 64-bit compare-and-swap. Returns the old value."""
        return self._atomic("cas", where, expected, desired)

    def swap(self, where: Address, value: int) -> int:
        """Atomic 64-bit swap. Returns the old value."""
        return self._atomic("swap", where, value)
