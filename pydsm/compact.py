"""CoRM, compactable remote memory: a daemon's store of small objects whose
blocks are merged while readers keep reading them one-sidedly
(``csrc/include/dsm/compact.h``).

    >>> with pydsm.Cluster.local(nodes=2, fabric="shm") as c:
    ...     store = c.compact.store(node=0)
    ...     p = store.alloc(32)
    ...     store.write(p, b"hello")
    ...     store.get(p)            # one-sided, validated; falls back as needed
    b'hello'

A :class:`CompactPointer` is the 128-bit pointer; the calls that correct a
pointer (``read``, ``scan_read``, ``get``, ``write``, ``release``) update it
in place after compaction moved its object.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import numpy as np
import numpy.typing as npt

from . import _lib
from .errors import InvalidArgument
from .session import Session


#: numpy record layout of :meth:`CompactStore.usage` (the store's totals).
USAGE_TOTALS_DTYPE = np.dtype([(k, np.int64) for k in ("active_bytes", "object_bytes", "blocks", "alias_blocks",
                                                        "objects", "map_budget", "map_used", "block_size")])

#: numpy record layout of :meth:`CompactStore.usage_by_class`.
USAGE_DTYPE = np.dtype([("size_class", np.int32), ("slot_bytes", np.int32), ("blocks", np.int64),
                        ("objects", np.int64), ("fragmentation", np.float64)])


class CompactPointer:
    """The 128-bit client pointer (two 64-bit words)."""

    __slots__ = ("w0", "w1")

    def __init__(self, w0: int, w1: int) -> None:
        self.w0, self.w1 = int(w0), int(w1)

    def _fields(self) -> Any:
        e = _lib.ext()
        p = e.ffi.new("dsm_compact_ptr_t *")
        p.w[0], p.w[1] = self.w0, self.w1
        f = e.ffi.new("dsm_compact_ptr_fields_t *")
        e.lib.dsm_compact_ptr_decode(p, f)
        return f

    @property
    def node(self) -> int:
        return int(self._fields().rank)

    @property
    def object_id(self) -> int:
        return int(self._fields().id)

    @property
    def size_class(self) -> int:
        return int(self._fields().size_class)

    @property
    def offset(self) -> int:
        return int(self._fields().offset)

    @property
    def version(self) -> int:
        return int(self._fields().version)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactPointer) and (self.w0, self.w1) == (other.w0, other.w1)

    def __hash__(self) -> int:
        return hash((self.w0, self.w1))

    def __repr__(self) -> str:
        f = self._fields()
        return (f"<CompactPointer node={f.rank} offset={f.offset:#x} id={f.id} class={f.size_class} "
                f"version={f.version}>")


class CompactReads:
    """What :meth:`CompactStore.read_many` read: ``len(reads)`` objects,
    ``reads[i]`` the bytes of the i-th, and how long the reads took,
    measured inside C (:attr:`seconds`, :attr:`ns_per_read`).

    Attributes:
        data: uint8 array (objects, size): object i's bytes at the start of row i.
        lengths: int64 array, each object's length.
        seconds: the reads' time, measured in C around them alone.
    """

    __slots__ = ("data", "lengths", "seconds")

    def __init__(self, data: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64], seconds: float) -> None:
        self.data, self.lengths, self.seconds = data, lengths, seconds

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> bytes:
        return self.data[i, :int(self.lengths[i])].tobytes()

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def tolist(self) -> List[bytes]:
        return list(self)

    @property
    def ns_per_read(self) -> float:
        """The reads' mean time in nanoseconds (nan for no reads)."""
        return self.seconds * 1e9 / len(self) if len(self) else float("nan")

    def __repr__(self) -> str:
        return f"<CompactReads {len(self)} objects, {self.ns_per_read:.0f} ns a read (timed in C)>"


class CompactStore:
    """The CoRM store of daemon ``node``, used from this cluster's client
    (``c.compact.store(node)``)."""

    def __init__(self, session: Session, node: int) -> None:
        self.session = session
        self.node = session.check_node(node)

    def __repr__(self) -> str:
        return f"<CompactStore node={self.node}>"

    # ------------------------------------------------------------ helpers
    def _call(self, fn: str, *args: Any) -> int:
        lib = _lib.ext().lib
        with self.session.in_use() as n:
            c = lib.dsm_compact_of(n)
            if c == _lib.ext().ffi.NULL:
                raise InvalidArgument("this cluster's node has no CoRM store attached", op=fn)
            return int(getattr(lib, fn)(c, *args))

    @staticmethod
    def _cptr(ptr: CompactPointer) -> Any:
        if not isinstance(ptr, CompactPointer):
            raise InvalidArgument(f"expected a CompactPointer, not {type(ptr).__name__}")
        p = _lib.ext().ffi.new("dsm_compact_ptr_t *")
        p.w[0], p.w[1] = ptr.w0, ptr.w1
        return p

    @staticmethod
    def _update(ptr: CompactPointer, p: Any) -> None:
        ptr.w0, ptr.w1 = int(p.w[0]), int(p.w[1])

    # ---------------------------------------------------------------- API
    def alloc(self, size: int) -> CompactPointer:
        """A new (empty) object of up to ``size`` bytes."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise InvalidArgument(f"size must be a non-negative int, not {size!r}", op="compact_alloc")
        p = _lib.ext().ffi.new("dsm_compact_ptr_t *")
        st = self._call("dsm_compact_alloc", self.node, int(size), p)
        _lib.check(st, f"cannot allocate a {size}-byte object", node=self.node, op="compact_alloc")
        return CompactPointer(p.w[0], p.w[1])

    def free(self, ptr: CompactPointer) -> None:
        p = self._cptr(ptr)
        _lib.check(self._call("dsm_compact_free", p), "cannot free", node=ptr.node, op="compact_free")

    def write(self, ptr: CompactPointer, data: Union[bytes, bytearray, memoryview, np.ndarray]) -> None:
        """Replace the object's bytes (an RPC under the object's lock)."""
        raw = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data)
        p = self._cptr(ptr)
        st = self._call("dsm_compact_write", p, raw, len(raw))
        _lib.check(st, f"cannot write {len(raw)} bytes", node=ptr.node, op="compact_write")
        self._update(ptr, p)

    def _read(self, fn: str, ptr: CompactPointer, correct: bool) -> bytes:
        e = _lib.ext()
        p = self._cptr(ptr)
        cap = 4096
        buf = e.ffi.new("uint8_t[]", cap)
        n = e.ffi.new("size_t *")
        st = self._call(fn, p, buf, cap, n)
        _lib.check(st, "cannot read", node=ptr.node, op=fn.replace("dsm_", ""))
        if correct:
            self._update(ptr, p)
        return bytes(e.ffi.buffer(buf, n[0]))

    def read(self, ptr: CompactPointer) -> bytes:
        """The object's bytes by RPC (corrects the pointer)."""
        return self._read("dsm_compact_read", ptr, True)

    def direct_read(self, ptr: CompactPointer) -> bytes:
        """One-sided and validated; BadAddress if the object is not at the
        pointer's offset (moved or freed), Timeout if it stayed locked."""
        return self._read("dsm_compact_direct_read", ptr, False)

    def scan_read(self, ptr: CompactPointer) -> bytes:
        """One-sided read of the whole block, scanned for the object (corrects the pointer)."""
        return self._read("dsm_compact_scan_read", ptr, True)

    def get(self, ptr: CompactPointer) -> bytes:
        """direct_read, then scan_read, then the RPC read."""
        return self._read("dsm_compact_get", ptr, True)

    def read_many(self, ptrs: Sequence[CompactPointer], how: str = "get", *, size: int = 4096) -> "CompactReads":
        """Read every pointer's object in one C call, one read after another
        (``how``: ``"direct"``, ``"scan"``, ``"get"`` or ``"rpc"``, the reads
        of :meth:`direct_read`, :meth:`scan_read`, :meth:`get` and
        :meth:`read`), each of at most ``size`` bytes. The pointers are
        corrected as those reads correct them. The first failure raises,
        naming the pointer's index. The reads are timed inside C
        (:attr:`CompactReads.seconds`), so a batch measures CoRM, not Python.
        """
        kinds = {"rpc": "DSM_COMPACT_READ_RPC", "direct": "DSM_COMPACT_READ_DIRECT",
                 "scan": "DSM_COMPACT_READ_SCAN", "get": "DSM_COMPACT_READ_GET"}
        if how not in kinds:
            raise InvalidArgument(f"how must be one of {', '.join(kinds)}, not {how!r}", op="compact_read_many")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise InvalidArgument(f"size must be a positive int, not {size!r}", op="compact_read_many")
        ptrs = list(ptrs)
        bad = next((p for p in ptrs if type(p) is not CompactPointer), None)
        if bad is not None:
            raise InvalidArgument(f"expected CompactPointers, not {type(bad).__name__}", op="compact_read_many")
        e = _lib.ext()
        words = np.array([(p.w0, p.w1) for p in ptrs], dtype=np.uint64).reshape(len(ptrs), 2)
        before = words.copy()
        data = np.zeros((len(ptrs), int(size)), np.uint8)
        lens = np.zeros(len(ptrs), np.uint64)
        done, elapsed = e.ffi.new("size_t *"), e.ffi.new("uint64_t *")
        cptrs = e.ffi.cast("dsm_compact_ptr_t *", e.ffi.from_buffer(words))
        st = self._call("dsm_compact_read_many", getattr(e.lib, kinds[how]), cptrs, len(ptrs),
                        e.ffi.from_buffer(data), int(size), e.ffi.cast("size_t *", e.ffi.from_buffer(lens)),
                        done, elapsed)
        for i in np.flatnonzero((words[:done[0]] != before[:done[0]]).any(axis=1)).tolist():
            ptrs[i].w0, ptrs[i].w1 = int(words[i, 0]), int(words[i, 1])   # corrected by the read
        if st != 0:
            bad = ptrs[done[0]]
            _lib.check(st, f"cannot read pointer {done[0]} of {len(ptrs)} ({bad!r})", node=bad.node,
                       op=f"compact_read_many({how})")
        return CompactReads(data, lens.astype(np.int64), int(elapsed[0]) / 1e9)

    def get_array(self, ptr: CompactPointer, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        """The object's bytes as a numpy array of ``dtype``."""
        arr: npt.NDArray[Any] = np.frombuffer(self.get(ptr), dtype=dtype).copy()
        return arr

    def release(self, ptr: CompactPointer) -> None:
        """Declare the pointer's old block dead for this object (release_ptr)."""
        p = self._cptr(ptr)
        _lib.check(self._call("dsm_compact_release_ptr", p), "cannot release", node=ptr.node, op="compact_release")
        self._update(ptr, p)

    def compact(self, size_class: int = -1) -> Dict[str, int]:
        """Run a compaction round now; returns its merge counts."""
        s = _lib.ext().ffi.new("dsm_compact_stats_t *")
        st = self._call("dsm_compact_now", self.node, int(size_class), s)
        _lib.check(st, "compaction stopped", node=self.node, op="compact_compact")
        return {"merges": int(s.merges), "moved": int(s.moved), "kept": int(s.kept),
                "refused_budget": int(s.refused_budget)}

    def _usage(self) -> Any:
        u = _lib.ext().ffi.new("dsm_compact_usage_t *")
        _lib.check(self._call("dsm_compact_usage", self.node, u), "cannot read the store's figures",
                   node=self.node, op="compact_usage")
        return u

    def usage(self) -> np.void:
        """The store's totals as one numpy record (:data:`USAGE_TOTALS_DTYPE`):
        active memory (bytes of blocks holding objects), live object bytes,
        blocks, old blocks still aliased, objects, and the mapping budget
        aliasing may use and uses now. Fields read as ``u["active_bytes"]``."""
        u = self._usage()
        rec = np.zeros(1, dtype=USAGE_TOTALS_DTYPE)
        rec[0] = tuple(int(getattr(u, k)) for k in USAGE_TOTALS_DTYPE.names or ())
        out: np.void = rec[0]
        return out

    def usage_by_class(self) -> np.ndarray:
        """One record per size class: blocks, objects and fragmentation
        (1 - objects / slots in those blocks; 0 for a class with no block)."""
        lib = _lib.ext().lib
        u = self._usage()
        n = int(lib.dsm_compact_class_count())
        out = np.zeros(n, dtype=USAGE_DTYPE)
        for c in range(n):
            slot = int(lib.dsm_compact_class_slot_bytes(c))
            blocks, objs = int(u.class_blocks[c]), int(u.class_objects[c])
            slots = blocks * (int(u.block_size) // slot) if slot else 0
            out[c] = (c, slot, blocks, objs, 1.0 - objs / slots if slots else 0.0)
        return out


class Compact:
    """CoRM on a cluster (``c.compact``): each daemon's store of compactable
    objects, ``c.compact.store(node)`` or ``c.compact[node]``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __repr__(self) -> str:
        return f"<pydsm.Compact of the cluster at {self.session.coordinator or '?'}>"

    def store(self, node: int = 0) -> CompactStore:
        """Daemon ``node``'s CoRM store."""
        self.session.ensure_open()
        return CompactStore(self.session, node)

    def __getitem__(self, node: int) -> CompactStore:
        return self.store(node)
